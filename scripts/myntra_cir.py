"""A small real-image CIR set from the Myntra product photos, for end-to-end runs and demos.

The official CIR images cannot be shipped, so this builds colour-change queries from real product
photos and their attributes: reference = a product, modification text = "change the colour to
<colour>", ground truths = every product of the same article type and gender in that colour (several
per query, like CIRCO). Written as M-BEIR task-7 files (image,text -> image) plus the image pool, so
``unirag cir --dataset mbeir`` reads it like any M-BEIR CIR task.

A data-preparation script, not part of the library: ``scripts/make_myntra_cir.py`` runs it, and
the CIR tests import it (``tests/cir/conftest.py`` puts ``scripts/`` on the path).
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from pathlib import Path

from unirag.data.mbeir import write_candidates, write_queries
from unirag.data.records import Candidate, Modality, Query
from unirag.errors import InputError


def _read_products(path: Path) -> list[dict]:
    if not path.exists():
        raise InputError("products file not found", path=path)
    rows = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise InputError(f"malformed JSON ({e.msg})", path=path, line=lineno) from None
    return rows


def build_colour_cir(products_jsonl: str | Path, out_dir: str | Path, n_queries: int = 200, seed: int = 0,
                     pool_size: int | None = None) -> tuple[Path, Path]:
    """Write ``queries.jsonl`` and ``pool.jsonl`` (paths relative to the Myntra folder). Returns both paths.

    ``pool_size`` keeps a seeded random sample of the products (always containing every ground
    truth of the chosen queries); ``None`` keeps all of them.
    """
    rows = _read_products(Path(products_jsonl))
    groups: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    for r in rows:
        if r.get("articleType") and r.get("baseColour") and r.get("image"):
            groups[(r["articleType"], r.get("gender", ""), r["baseColour"])].append(r)
    colours: dict[tuple[str, str], list[str]] = defaultdict(list)
    for art, gender, colour in groups:
        colours[(art, gender)].append(colour)
    rng = random.Random(seed)
    eligible = [r for r in rows if len(colours.get((r.get("articleType"), r.get("gender", "")), [])) > 1
                and r.get("baseColour")]
    rng.shuffle(eligible)
    queries: list[Query] = []
    for r in eligible[:n_queries]:
        key = (r["articleType"], r.get("gender", ""))
        other = rng.choice(sorted(c for c in colours[key] if c != r["baseColour"]))
        targets = [f"myntra:{t['id']}" for t in groups[(*key, other)]]
        queries.append(Query(qid=f"myntra-cir:{len(queries) + 1}", modality=Modality.IMAGE_TEXT,
                             txt=f"change the colour to {other.lower()}", img_path=r["image"],
                             src_content=json.dumps({"reference_id": r["id"], "articleType": r["articleType"],
                                                     "from": r["baseColour"], "to": other}),
                             pos_cand_list=targets, task_id=7))
    keep = rows
    if pool_size is not None and pool_size < len(rows):
        needed = {t for q in queries for t in q.pos_cand_list}
        rest = [r for r in rows if f"myntra:{r['id']}" not in needed]
        rng.shuffle(rest)
        chosen = needed | {f"myntra:{r['id']}" for r in rest[: max(0, pool_size - len(needed))]}
        keep = [r for r in rows if f"myntra:{r['id']}" in chosen]
    out = Path(out_dir)
    qpath, ppath = out / "queries.jsonl", out / "pool.jsonl"
    write_queries(qpath, queries)
    write_candidates(ppath, (Candidate(did=f"myntra:{r['id']}", modality=Modality.IMAGE, img_path=r["image"])
                             for r in keep))
    return qpath, ppath


FASHIONIQ_CATEGORIES = {"shirt": "Shirts", "toptee": "Tshirts", "dress": "Dresses"}


def build_fashioniq_format(products_jsonl: str | Path, out_dir: str | Path, n_per_category: int = 50,
                           seed: int = 0, categories: dict[str, str] | None = None) -> list[Path]:
    """FashionIQ-format files (``captions/cap.<cat>.val.json``, ``image_splits/split.<cat>.val.json``).

    Image names are Myntra product ids, so the images root is the Myntra ``images/`` folder (the
    FashionIQ loader accepts ``<name>.jpg`` where it expects ``<name>.png``). One target per query,
    two relative captions as FashionIQ annotators wrote them. Returns the caption files.
    """
    rows = _read_products(Path(products_jsonl))
    rng = random.Random(seed)
    out = Path(out_dir)
    written = []
    for cat, article in (categories or FASHIONIQ_CATEGORIES).items():
        items = [r for r in rows if r.get("articleType") == article and r.get("baseColour")]
        if not items:
            continue
        by_colour: dict[str, list[dict]] = defaultdict(list)
        for r in items:
            by_colour[r["baseColour"]].append(r)
        refs = [r for r in items if len(by_colour) > 1]
        rng.shuffle(refs)
        anns = []
        for r in refs[:n_per_category]:
            colour = rng.choice(sorted(c for c in by_colour if c != r["baseColour"]))
            target = rng.choice(by_colour[colour])
            anns.append({"target": str(target["id"]), "candidate": str(r["id"]),
                         "captions": [f"is {colour.lower()}",
                                      f"is {colour.lower()} instead of {r['baseColour'].lower()}."]})
        cap = out / "captions" / f"cap.{cat}.val.json"
        cap.parent.mkdir(parents=True, exist_ok=True)
        cap.write_text(json.dumps(anns, indent=1), encoding="utf-8")
        split = out / "image_splits" / f"split.{cat}.val.json"
        split.parent.mkdir(parents=True, exist_ok=True)
        split.write_text(json.dumps([str(r["id"]) for r in items]), encoding="utf-8")
        written.append(cap)
    return written
