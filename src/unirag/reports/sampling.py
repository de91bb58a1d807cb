"""The caption sampling ablation (paper §5.2.1) and its Table 7.

Image generation is slow, so the paper generates from one random caption per COCO image (5k of 25k)
and checks the sensitivity on a second sample: 1,030 captions shared, FID / CLIP Score within 1 %.
Samples are drawn seeded and saved as M-BEIR query files for ``--queries``; two samples and the
metrics of their runs are compared, and ``unirag report`` puts a pipeline's runs on the sample sets
side by side (rows by set, then k). Sample sets of one collection are recognised from the files, not
their names: each holds exactly one caption per image and they cover the same images (another dataset
never does; a file with several captions per image is the source). Sets are numbered in file-name order.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from unirag.data.mbeir import read_queries
from unirag.data.records import Query
from unirag.errors import InputError
from unirag.reports.collect import RunSummary, summarize_run
from unirag.reports.tables import Table, runs_table, slug
from unirag.runs.atomic import atomic_write_json

SET_LABEL = "Caption Set {}"


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


def compare_sample_runs(set_a: str | Path, set_b: str | Path, runs_a: Sequence[str | Path] = (),
                        runs_b: Sequence[str | Path] = (), out: str | Path | None = None) -> dict[str, Any]:
    """``unirag report sampling compare``: the overlap of two sampled query sets and, for each pair of
    evaluated runs (``runs_a[i]`` on set A, ``runs_b[i]`` on set B), every metric's difference.
    Returns ``{"overlap", "runs": [{"run_a", "run_b", "name_a", "name_b", "k", "metrics"}]}``;
    ``out``: also written there as JSON (atomically)."""
    if len(runs_a) != len(runs_b):
        raise InputError(f"--run-a given {len(runs_a)} time(s) but --run-b {len(runs_b)}: they pair up in order")
    sample_a, sample_b = read_queries(set_a), read_queries(set_b)  # overlap: shared captions (qids), images
    qa, qb = {q.qid for q in sample_a}, {q.qid for q in sample_b}
    ia, ib = {image_key(q) for q in sample_a}, {image_key(q) for q in sample_b}
    overlap = {"n_a": len(qa), "n_b": len(qb), "common_captions": len(qa & qb),
               "common_fraction": len(qa & qb) / max(1, min(len(qa), len(qb))),
               "images_a": len(ia), "images_b": len(ib), "common_images": len(ia & ib)}
    result: dict[str, Any] = {"overlap": overlap, "runs": []}
    for a, b in zip(runs_a, runs_b, strict=True):
        ra, rb = summarize_run(a), summarize_run(b)
        metrics = {}  # per metric present in both: values, difference b - a, relative difference in % of a
        for name, va in ra.metrics.items():
            if va is not None and rb.metrics.get(name) is not None:
                diff = float(rb.metrics[name]) - float(va)
                metrics[name] = {"a": float(va), "b": float(rb.metrics[name]), "diff": diff,
                                 "rel_diff_pct": 100.0 * diff / abs(float(va)) if va else float("nan")}
        result["runs"].append({"run_a": str(a), "run_b": str(b), "name_a": ra.name, "name_b": rb.name, "k": ra.k,
                               "metrics": metrics})
    if out is not None:
        atomic_write_json(out, result)
    return result


def pipelines(runs: Sequence[RunSummary]) -> dict[str, list[RunSummary]]:
    """Runs of one sample set by pipeline; a generator's zero-shot runs are the k = 0 rows of each of its
    few-shot pipelines (as in the paper's tables), or a pipeline of their own when it has none."""
    out: dict[str, list[RunSummary]] = defaultdict(list)
    zero_shot = [r for r in runs if r.mode != "retrieval" and (r.mode == "zero-shot" or r.k == 0)]
    for r in runs:
        if not any(r is z for z in zero_shot):
            out[r.series].append(r)
    for r in zero_shot:
        targets = [s for s, rs in out.items() if rs[0].mode in ("rag", "random") and rs[0].generator == r.generator]
        for s in targets or [r.generator]:
            out[s].append(r)
    return out


def sampling_tables(runs: Sequence[RunSummary]) -> list[Table]:
    """One table per pipeline that was run on at least two sample sets of the same images."""
    by_file: dict[Path, list[RunSummary]] = defaultdict(list)
    for r in runs:
        path = r.recorded_path("queries") if r.task == "image" else None
        if path is not None:
            by_file[path.resolve()].append(r)
    if len(by_file) < 2:
        return []
    collections: dict[frozenset[str], list[tuple[Path, frozenset[str]]]] = defaultdict(list)
    for path in by_file:  # a sample file: readable, and one caption query per image
        try:
            queries = read_queries(path)
        except (InputError, OSError):
            continue
        images = [image_key(q) for q in queries]
        if queries and None not in images and len(set(images)) == len(images):
            collections[frozenset(images)].append((path, frozenset(q.qid for q in queries)))
    tables = []
    for images, files in collections.items():
        if len(files) < 2:
            continue
        files.sort(key=lambda f: (f[0].name, str(f[0])))
        per_set = [pipelines(by_file[path]) for path, _ in files]
        for name in sorted({name for p in per_set for name in p}):
            sets = [(SET_LABEL.format(i), path, qids, sorted(p[name], key=RunSummary.sort_key))
                    for i, ((path, qids), p) in enumerate(zip(files, per_set, strict=True), start=1) if name in p]
            if len(sets) >= 2:
                tables.append(_table(name, len(images), sets))
    return tables


def _table(pipeline: str, n_images: int, sets: list[tuple[str, Path, frozenset[str], list[RunSummary]]]) -> Table:
    """Rows by set (its label on its first row, blank below: the paper's layout), then k; the legend says
    which file each set is and how much the sets overlap (the paper: 1,030 of 5k captions in common)."""
    first, first_qids = sets[0][0], sets[0][2]
    legend = "; ".join([f"{first}: {sets[0][1].name} ({len(first_qids)} captions)"]
                       + [f"{label}: {path.name} ({len(qids)} captions, {len(qids & first_qids)} in common with {first})"
                          for label, path, qids, _ in sets[1:]])
    return runs_table("image", [r for *_, rs in sets for r in rs], f"image_sampling_{slug(pipeline)}",
                      f"Image generation — {pipeline} on {len(sets)} caption sample sets",
                      labels=[label if i == 0 else "" for label, *_, rs in sets for i in range(len(rs))],
                      notes=[legend + f". Every set has one caption for each of the same {n_images} images."],
                      lead=("sample_set", "queries"), leads=[(label, path.name) for label, path, _, rs in sets for _ in rs])
