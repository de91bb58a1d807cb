"""Example-selection benchmark (not part of the test suite): what diversity and the leakage guard do
to RAG captions, and what each selection option costs per query at 1M candidates.

Part 1, quality (bundled COCO sample: 51 real photos, 255 captions, offline encoder). The pool gets
``--plant`` planted copies: photos of the sample resized to half and re-encoded as JPEG q60, each
with its photo's five captions under new ids (what a merged web-scale pool holds). Image->caption
retrieval, positives excluded by id (``--exclude-positives``, the paper's leakage-free setting),
k = 5, then the offline ``retrieval:consensus`` captioner over the examples; CIDEr against the
query's own references. Rows: relevance only / ``--set one_per_image=on`` / ``--set diversity=mmr``, each
with the guard on ``report`` (flagged copies stay in the prompt) and ``exclude``. Columns: CIDEr,
distinct photos per example set, examples flagged as near-duplicates, leak rate (queries whose
examples still show a flagged copy), selection time per query.

Part 2, cost (``--n`` synthetic candidates, default 1M, of size ``--dim``; a fifth images, each with
four captions sharing its source id; ten M-BEIR dataset prefixes, so ``dataset=<one>`` keeps 10 %).
Exact (flat) search, ``--threads`` threads, ms per query over ``--queries`` queries in batches:
unfiltered vs ``where={"dataset": ...}`` (target: filtered <= 2x unfiltered), then the retriever's
pair assembly with each option (relevance only, one per image, MMR, the guard on report).

Usage:  python benchmarks/bench_selection.py [--n 1000000] [--dim 256] [--queries 200] [--threads 1]
Small smoke run:  python benchmarks/bench_selection.py --n 50000 --queries 50
"""

from __future__ import annotations

import argparse
import io
import json
import tempfile
import time
from pathlib import Path

from _harness import pin_threads_from_argv  # noqa: E402

pin_threads_from_argv()

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "src" / "unirag" / "demo" / "data"
ENCODER_INFO = {"name": "synthetic", "spec": None, "config": {}, "fingerprint": "bench-selection"}
K = 5
VARIANTS = (("relevance only", {}), ("one per image", {"one_per_image": True}), ("MMR (default lambda)", {"diversity": "mmr"}))


# -- part 1: quality on the bundled sample -------------------------------------------------------
def _plant(work: Path, n: int) -> tuple[Path, Path, Path]:
    """Import the sample, add ``n`` planted copies to its pool; returns (pool, queries, qrels)."""
    from PIL import Image

    from unirag.data.importers.coco import import_coco
    from unirag.data.mbeir import read_candidates, write_candidates
    from unirag.data.records import Candidate, Modality

    data = work / "data"
    import_coco(SAMPLE / "captions.json", SAMPLE / "images", data, show_progress=False)
    pool = list(read_candidates(data / "pool.jsonl"))
    by_source: dict[str, list[str]] = {}
    for c in pool:
        if c.modality is Modality.TEXT:
            by_source.setdefault(c.source_id, []).append(c.txt)
    images = [c for c in pool if c.modality is Modality.IMAGE][:n]
    copies = work / "copies"
    copies.mkdir()
    for i, c in enumerate(images):
        with Image.open(SAMPLE / "images" / c.img_path) as im:
            im = im.convert("RGB")
            small = im.resize((im.width // 2, im.height // 2), Image.Resampling.BILINEAR)
        buf = io.BytesIO()
        small.save(buf, "JPEG", quality=60)
        path = copies / f"copy{i}.jpg"
        path.write_bytes(buf.getvalue())
        pool.append(Candidate(f"planted:img:{i}", Modality.IMAGE, img_path=str(path), source_id=f"planted:{i}"))
        pool += [Candidate(f"planted:txt:{i}:{j}", Modality.TEXT, txt=t, source_id=f"planted:{i}")
                 for j, t in enumerate(by_source[c.source_id])]
    write_candidates(data / "pool.jsonl", pool)
    return data / "pool.jsonl", data / "queries_task3_image2text.jsonl", data / "qrels_task3.txt"


def part_quality(args, work: Path) -> list[dict]:
    from unirag import Index
    from unirag.data.mbeir import read_qrels, read_queries
    from unirag.encoders.registry import load_encoder
    from unirag.metrics.captions import caption_metrics
    from unirag.pipelines.captioner import Captioner
    from unirag.retrieval.retriever import Retriever

    pool, queries_path, qrels_path = _plant(work, args.plant)
    images = (SAMPLE / "images").resolve()
    Index.build(pool, work / "index", encoder=load_encoder(None), images_root=images, progress=False)
    retriever = Retriever(work / "index")
    queries = read_queries(queries_path)
    qrels = read_qrels(qrels_path)
    vectors = retriever.encoder.encode_records(queries, images)
    refs = {q.qid: [retriever.index.metas[retriever.index.gid_of(d)].txt for d in q.pos_cand_list] for q in queries}
    captioner = Captioner("retrieval:consensus", similarity=args.similarity)
    rows = []
    for name, options in VARIANTS:
        for guard in ("report", "exclude"):
            start = time.perf_counter()
            results = retriever.retrieve_vectors(queries, vectors, K, "text", exclude_qrels=qrels,
                                                 query_images_root=images,
                                                 selection={**options, "near_duplicates": guard})
            seconds = time.perf_counter() - start
            preds = {q.qid: captioner.caption(images / q.img_path, r).text
                     for q, r in zip(queries, results, strict=True)}
            cider = caption_metrics(preds, refs, meteor=False)["CIDEr"]
            rows.append({"selection": name, "near_duplicates": guard, "CIDEr": round(cider, 2),
                         "distinct_photos": round(float(np.mean([len({p.image_did for p in r.pairs})
                                                                  for r in results])), 2),
                         "flagged": sum(r.near_duplicates["flagged"] for r in results),
                         "shown_flagged": sum(1 for r in results for p in r.pairs if p.near_duplicate),
                         "leak_rate": round(sum(any(p.near_duplicate for p in r.pairs) for r in results)
                                            / len(results), 3),
                         "ms_per_query": round(1000 * seconds / len(queries), 1)})
            print(json.dumps(rows[-1]), flush=True)
    return rows


# -- part 2: cost at 1M ---------------------------------------------------------------------------
def _synthetic_index(args, out: Path) -> None:
    """``--n`` candidates: images (one in five) and their four captions, round-robin over ten dataset
    prefixes; vectors: a cluster mixture, captions near their image (so pairing is meaningful)."""
    from unirag.data.records import Modality
    from unirag.index.writer import IndexWriter

    n_img = args.n // 5
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((256, args.dim)).astype(np.float32)

    def unit(x):
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    def image_vectors(start, stop):
        r = np.random.default_rng(start)
        return unit(centres[np.arange(start, stop) % 256] + 0.8 * r.standard_normal((stop - start, args.dim),
                                                                                    dtype=np.float32))

    chunk = 20000

    def chunks():
        for s in range(0, n_img, chunk):
            e = min(n_img, s + chunk)
            metas = [{"did": f"{i % 10}:img:{i}", "img_path": f"{i}.jpg", "source_id": str(i)} for i in range(s, e)]
            yield Modality.IMAGE, metas, image_vectors(s, e)
        for s in range(0, n_img, chunk // 4):
            e = min(n_img, s + chunk // 4)
            base = np.repeat(image_vectors(s, e), 4, axis=0)
            r = np.random.default_rng(10**9 + s)
            vecs = unit(base + 0.6 * r.standard_normal(base.shape, dtype=np.float32))
            metas = [{"did": f"{i % 10}:txt:{i}:{j}", "txt": f"caption {j} of item {i}", "source_id": str(i)}
                     for i in range(s, e) for j in range(4)]
            yield Modality.TEXT, metas, vecs

    with IndexWriter(out, args.dim, ENCODER_INFO) as writer:
        for part in chunks():
            writer.add(*part)
        writer.commit()


def _ms(fn, queries: np.ndarray, batch: int) -> float:
    start = time.perf_counter()
    for s in range(0, len(queries), batch):
        fn(queries[s : s + batch])
    return 1000 * (time.perf_counter() - start) / len(queries)


def part_cost(args, work: Path) -> list[dict]:
    from unirag.data.records import Modality, Query
    from unirag.index.handle import Index
    from unirag.retrieval.retriever import Retriever

    out = work / "synthetic"
    start = time.perf_counter()
    _synthetic_index(args, out)
    print(f"built {args.n:,} x {args.dim} in {time.perf_counter() - start:.0f} s", flush=True)
    index = Index.open(out)
    rng = np.random.default_rng(5)
    q = index.vectors(rng.integers(0, len(index), args.queries).tolist())
    q = q + 0.3 * rng.standard_normal(q.shape).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    where = {"dataset": "3"}
    index.topk(q[:2], 50, "text")  # page the index in before timing
    start = time.perf_counter()
    index.topk(q[:1], 50, "text", where=where)
    first_filter_s = time.perf_counter() - start  # one SQL scan, then the filter is kept
    rows = []
    plain = _ms(lambda b: index.topk(b, 50, "text"), q, args.batch)
    filtered = _ms(lambda b: index.topk(b, 50, "text", where=where), q, args.batch)
    one = _ms(lambda b: [index.topk(b[i : i + 1], 50, "text") for i in range(len(b))], q[: args.queries // 4], 1)
    one_f = _ms(lambda b: [index.topk(b[i : i + 1], 50, "text", where=where) for i in range(len(b))],
                q[: args.queries // 4], 1)
    got = index.topk(q[:20], 50, "text", where=where)[1]
    assert all(index.metas[int(g)].did.startswith("3:") for g in got.ravel() if g >= 0)
    rows += [{"what": f"exact search, batches of {args.batch}, unfiltered", "ms_per_query": round(plain, 2)},
             {"what": "exact search, batches, dataset filter (10 %)", "ms_per_query": round(filtered, 2),
              "vs_unfiltered": round(filtered / plain, 2)},
             {"what": "exact search, one query at a time, unfiltered", "ms_per_query": round(one, 2)},
             {"what": "exact search, one query at a time, dataset filter (10 %)", "ms_per_query": round(one_f, 2),
              "vs_unfiltered": round(one_f / one, 2)},
             {"what": "building the 10 % filter (first search only)", "ms_per_query": round(1000 * first_filter_s, 1)}]
    for r in rows:
        print(json.dumps(r), flush=True)

    retriever = Retriever(index)
    queries = [Query(f"q{i}", Modality.IMAGE, img_path=f"query{i}.jpg") for i in range(len(q))]
    base = None
    for name, options in (("pairs: relevance only, guard off", {"near_duplicates": "off"}),
                          ("pairs: guard on report (default)", {}),
                          ("pairs: one per image", {"one_per_image": True, "near_duplicates": "off"}),
                          ("pairs: MMR", {"diversity": "mmr", "near_duplicates": "off"}),
                          ("pairs: dataset filter + one per image + MMR",
                           {"diversity": "mmr", "one_per_image": True, "near_duplicates": "off", "where": where})):
        ms = _ms(lambda b, o=options: retriever.retrieve_vectors(queries[: len(b)], b, K, "text", selection=o),
                 q, args.batch)
        base = base or ms
        rows.append({"what": name, "ms_per_query": round(ms, 2), "vs_relevance_only": round(ms / base, 2)})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--plant", type=int, default=10, help="planted copies in the sample's pool")
    ap.add_argument("--similarity", default="lexical", choices=["lexical", "minilm"],
                    help="consensus captioner similarity (minilm: the default captioner, slower)")
    ap.add_argument("--skip", choices=["quality", "cost"], default=None)
    ap.add_argument("--out", type=Path, default=None, help="also write the rows as JSON here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-selection-") as tmp:
        work = Path(tmp)
        result = {"args": {k: str(v) for k, v in vars(args).items()}}
        if args.skip != "quality":
            (work / "q").mkdir()
            result["quality"] = part_quality(args, work / "q")
        if args.skip != "cost":
            (work / "c").mkdir()
            result["cost"] = part_cost(args, work / "c")
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
