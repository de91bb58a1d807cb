"""Caption sampling ablation (paper §5.2.1): one caption per image, and how much the choice matters.

The paper generates from one random caption per COCO image (5k of 25k) and checks the sensitivity on
a second sample (1,030 captions shared, FID / CLIP Score within 1 %). Samples are seeded and saved as
M-BEIR query files for ``--queries``; two samples and the metrics of their runs are compared here.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from unirag.data.mbeir import read_queries, write_queries
from unirag.data.records import Query
from unirag.errors import InputError


def image_key(q: Query) -> str | None:
    """The image a caption query describes: its first positive (M-BEIR text->image has one)."""
    return q.pos_cand_list[0] if q.pos_cand_list else None


def sample_one_per_image(queries: Sequence[Query], seed: int) -> list[Query]:
    """One query per positive image, drawn with ``random.Random(seed)``; images in first-seen order."""
    groups: dict[str, list[Query]] = {}
    for q in queries:
        key = image_key(q)
        if key is None:
            raise InputError(f"query {q.qid!r} has no positive image to group by", field="pos_cand_list")
        groups.setdefault(key, []).append(q)
    rng = random.Random(seed)
    return [rng.choice(group) for group in groups.values()]


def save_sample(queries_path: str | Path, seed: int, out: str | Path) -> list[Query]:
    """Sample from an M-BEIR caption-query file and write the sample as an M-BEIR query file."""
    sample = sample_one_per_image(read_queries(queries_path), seed)
    write_queries(out, sample)
    return sample


def compare_samples(a: Sequence[Query], b: Sequence[Query]) -> dict[str, Any]:
    """Overlap of two samples: shared captions (qids) and image coverage of each."""
    qa, qb = {q.qid for q in a}, {q.qid for q in b}
    ia, ib = {image_key(q) for q in a}, {image_key(q) for q in b}
    return {"n_a": len(qa), "n_b": len(qb), "common_captions": len(qa & qb),
            "common_fraction": len(qa & qb) / max(1, min(len(qa), len(qb))),
            "images_a": len(ia), "images_b": len(ib), "common_images": len(ia & ib)}


def compare_metrics(a: Mapping[str, float], b: Mapping[str, float]) -> dict[str, dict[str, float]]:
    """Per metric present in both: values, difference b - a, and relative difference in % of a."""
    out: dict[str, dict[str, float]] = {}
    for name in a:
        if name in b and a[name] is not None and b[name] is not None:
            diff = float(b[name]) - float(a[name])
            rel = 100.0 * diff / abs(float(a[name])) if a[name] else float("nan")
            out[name] = {"a": float(a[name]), "b": float(b[name]), "diff": diff, "rel_diff_pct": rel}
    return out


def compare_sample_runs(set_a: str | Path, set_b: str | Path, runs_a: Sequence[str | Path] = (),
                        runs_b: Sequence[str | Path] = (), out: str | Path | None = None) -> dict[str, Any]:
    """``unirag report sampling compare``: the overlap of two sampled query sets and, for each pair of
    evaluated runs (``runs_a[i]`` on set A, ``runs_b[i]`` on set B), every metric's difference.
    Returns ``{"overlap", "runs": [{"run_a", "run_b", "name_a", "name_b", "k", "metrics"}]}``;
    ``out``: also written there as JSON (atomically)."""
    from unirag.reports.collect import summarize_run

    if len(runs_a) != len(runs_b):
        raise InputError(f"--run-a given {len(runs_a)} time(s) but --run-b {len(runs_b)}: they pair up in order")
    result: dict[str, Any] = {"overlap": compare_samples(read_queries(set_a), read_queries(set_b)), "runs": []}
    for a, b in zip(runs_a, runs_b, strict=True):
        ra, rb = summarize_run(a), summarize_run(b)
        result["runs"].append({"run_a": str(a), "run_b": str(b), "name_a": ra.name, "name_b": rb.name, "k": ra.k,
                               "metrics": compare_metrics(ra.metrics, rb.metrics)})
    if out is not None:
        from unirag.runs.atomic import atomic_write_json

        atomic_write_json(out, result)
    return result
