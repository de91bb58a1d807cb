"""Measure example diversity against relevance, to choose the default MMR lambda (docs/selection.md).

Two data sets, offline encoder, image->caption examples (what a captioning prompt gets), k = 5:

* **COCO, held-out-style**: every photo of ``coco-val2017-mini`` with its captions in the pool, plus
  ``--plant`` planted near-duplicates (a photo resized to half and re-encoded as JPEG q60, holding two
  of its photo's five captions while the original keeps three: one photo under two ids with
  different captions, as a merged M-BEIR-style pool holds). Queries: the photos held out of the
  offline encoder's anchors; each query's own captions (and its copy's) are excluded as positives.
  A photo and its copy count as **one** photo.
* **Products**: the Myntra fixture (112 real products: photo + title). Queries: every product photo,
  its own title excluded. "On topic": an example of the query's ``articleType``.

For each selection it prints distinct photos per 5 examples, the mean relevance (retrieval score) of
the chosen examples and its ratio to relevance-only selection, and (products) the on-topic share.

    .venv/bin/python scripts/measure_pair_diversity.py [--coco /work/shared/data/coco-val2017-mini]
"""

from __future__ import annotations

import argparse
import io
import json
import random
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
K = 5
LAMBDAS = (0.9, 0.8, 0.7, 0.6, 0.5, 0.3)


def coco_set(src: Path, work: Path, plant: int, seed: int):
    """(candidates, queries, identity of each did, topic of each did) for the COCO set."""
    from PIL import Image

    from unirag.data.records import Candidate, Modality, Query
    from unirag.encoders.offline import asset_metadata

    items = [json.loads(x) for x in (src / "captions.jsonl").read_text().splitlines() if x.strip()]
    held = {int(i) for i in asset_metadata()["held_out_coco_image_ids"]}
    planted = set(random.Random(seed).sample([it["image_id"] for it in items], plant))
    copies = work / "copies"
    copies.mkdir(parents=True, exist_ok=True)
    pool, identity, own = [], {}, {}
    for it in items:
        iid, path = it["image_id"], (src / it["image"]).resolve()
        keep = it["captions"][:3] if iid in planted else it["captions"]
        pool.append(Candidate(f"coco:img:{iid}", Modality.IMAGE, img_path=str(path), source_id=str(iid)))
        dids = [f"coco:txt:{iid}:{j}" for j in range(len(keep))]
        pool += [Candidate(d, Modality.TEXT, txt=t, source_id=str(iid)) for d, t in zip(dids, keep, strict=True)]
        if iid in planted:
            with Image.open(path) as im:
                im = im.convert("RGB")
                small = im.resize((im.width // 2, im.height // 2), Image.Resampling.BILINEAR)
            buf = io.BytesIO()
            small.save(buf, "JPEG", quality=60)
            copy = copies / f"copy-{iid}.jpg"
            copy.write_bytes(buf.getvalue())
            sid = f"copy-{iid}"
            pool.append(Candidate(f"web:img:{iid}", Modality.IMAGE, img_path=str(copy), source_id=sid))
            extra = [f"web:txt:{iid}:{j}" for j in range(len(it["captions"]) - 3)]
            pool += [Candidate(d, Modality.TEXT, txt=t, source_id=sid)
                     for d, t in zip(extra, it["captions"][3:], strict=True)]
            dids += extra
            identity[f"web:img:{iid}"] = iid
        identity[f"coco:img:{iid}"] = iid
        own[iid] = dids
    queries = [Query(qid=f"q:{it['image_id']}", modality=Modality.IMAGE,
                     img_path=str((src / it["image"]).resolve()), pos_cand_list=own[it["image_id"]], task_id=3)
               for it in items if it["image_id"] in held]
    return pool, queries, identity, None


def product_set(src: Path):
    from unirag.data.records import Candidate, Modality, Query

    rows = [json.loads(x) for x in (src / "products.jsonl").read_text().splitlines() if x.strip()]
    pool, queries, identity, topic = [], [], {}, {}
    for r in rows:
        pid, path = str(r["id"]), str((src / r["image"]).resolve())
        pool += [Candidate(f"p:img:{pid}", Modality.IMAGE, img_path=path, source_id=pid),
                 Candidate(f"p:txt:{pid}", Modality.TEXT, txt=r["productDisplayName"], source_id=pid)]
        identity[f"p:img:{pid}"] = pid
        topic[f"p:img:{pid}"] = topic[f"q:{pid}"] = r["articleType"]
        queries.append(Query(qid=f"q:{pid}", modality=Modality.IMAGE, img_path=path, pos_cand_list=[f"p:txt:{pid}"],
                             task_id=3))
    return pool, queries, identity, topic


def measure(name: str, pool, queries, identity, topic, work: Path) -> list[dict]:
    from unirag import Index, Pool, Retriever
    from unirag.data.records import Qrels

    index = Index.build(Pool(pool), work / f"index-{name}", progress=False)
    retriever = Retriever(index)
    vectors = retriever.encoder.encode_records(queries, None)
    qrels = Qrels({q.qid: set(q.pos_cand_list) for q in queries})
    variants = [("relevance only", {}), ("one per image", {"one_per_image": True}),
                *[(f"MMR λ {lam}", {"diversity": "mmr", "mmr_lambda": lam}) for lam in LAMBDAS]]
    rows, base = [], None
    for label, options in variants:
        results = retriever.retrieve_vectors(queries, vectors, K, "text", exclude_qrels=qrels, selection=options)
        photos = [len({identity.get(p.image_did, p.image_did) for p in r.pairs}) for r in results]
        rel = float(np.mean([np.mean([p.score for p in r.pairs]) for r in results if r.pairs]))
        base = rel if base is None else base
        row = {"data": name, "selection": label, "distinct_photos": round(float(np.mean(photos)), 2),
               "relevance": round(rel, 4), "relevance_ratio": round(rel / base, 3)}
        if topic is not None:
            row["on_topic"] = round(float(np.mean([topic[p.image_did] == topic[r.qid] for r in results
                                                   for p in r.pairs])), 3)
        rows.append(row)
        print(json.dumps(row, ensure_ascii=False), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--coco", type=Path, default=Path("/work/shared/data/coco-val2017-mini"),
                    help="coco-val2017-mini folder (captions.jsonl, images/)")
    ap.add_argument("--products", type=Path, default=REPO / "tests" / "fixtures" / "myntra",
                    help="products.jsonl + images/ (default: the Myntra test fixture)")
    ap.add_argument("--plant", type=int, default=40, help="COCO photos given a planted near-duplicate")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        rows = measure("COCO", *coco_set(args.coco, work, args.plant, args.seed), work)
        rows += measure("products", *product_set(args.products), work)
    print("\n| data | selection | distinct photos / 5 | mean relevance | vs relevance only | on topic |")
    print("|---|---|---:|---:|---:|---:|")
    for r in rows:
        on_topic = f"{100 * r['on_topic']:.1f} %" if "on_topic" in r else ""
        print(f"| {r['data']} | {r['selection']} | {r['distinct_photos']:.2f} | {r['relevance']:.4f} | "
              f"{100 * (r['relevance_ratio'] - 1):+.1f} % | {on_topic} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
