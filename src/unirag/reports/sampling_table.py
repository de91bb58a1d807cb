"""Paper Table 7 (§5.2.1): one image-generation pipeline run on several caption sample sets, in one table.

The paper generates from one sampled caption per image and checks the sensitivity to that choice on a
second sample (``unirag report sampling sample --seed 1`` / ``--seed 2``). Each sample is its own
queries file, hence its own per-dataset table; this table puts them side by side, rows by sample set
then k. Sample sets of one collection are recognised from the files, not their names: each holds
exactly one caption per image and they cover the same images (another dataset never does; a file with
several captions per image is the source). Sets are numbered in file-name order.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from unirag.errors import InputError
from unirag.reports.collect import RunSummary
from unirag.reports.tables import Table, runs_table, slug

SET_LABEL = "Caption Set {}"


def _one_caption_per_image(path: Path) -> tuple[frozenset[str], frozenset[str]] | None:
    """(qids, images) of a sample file; None when unreadable or not one caption query per image."""
    from unirag.data.mbeir import read_queries
    from unirag.metrics.sampling import image_key

    try:
        queries = read_queries(path)
    except (InputError, OSError):
        return None
    images = [image_key(q) for q in queries]
    if not queries or None in images or len(set(images)) != len(images):
        return None
    return frozenset(q.qid for q in queries), frozenset(images)


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
    for path in by_file:
        sample = _one_caption_per_image(path)
        if sample is not None:
            collections[sample[1]].append((path, sample[0]))
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
