"""Paper Table 7 (§5.2.1): one image-generation pipeline run on several caption sample sets, in one table.

Image generation is slow, so the paper generates from one sampled caption per image and checks the
sensitivity to that choice by running the same retriever + generator on a second sample
(``unirag report sampling sample --seed 1`` / ``--seed 2``). Each sample is its own queries file,
so the per-dataset tables put the two runs of a pipeline in two tables; the comparison the
section makes needs them side by side: rows grouped by sample set ("Caption Set 1", "Caption Set
2", ...) and then by k, columns FID, CLIP Score, IS (SD).

Which queries files are sample sets of one collection is read from the files themselves, not from
their names: files that each hold exactly one caption per image and cover the same images (as the
sampler writes them). Two different datasets (COCO and Fashion200k) never cover the same images,
and a file with several captions per image is the source, not a sample. A run whose queries file
cannot be read stays in its per-dataset table only. Sets are numbered in file-name order.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from unirag.errors import InputError
from unirag.reports.collect import RunSummary
from unirag.reports.tables import (
    cell,
    csv_table,
    header,
    metric_columns,
)

SET_LABEL = "Caption Set {}"


@dataclass
class SampleSet:
    label: str
    queries: Path
    qids: frozenset[str]
    runs: list[RunSummary]


@dataclass
class SamplingTable:
    pipeline: str
    n_images: int
    sets: list[SampleSet]

    @property
    def runs(self) -> list[RunSummary]:
        return [r for s in self.sets for r in s.runs]


def queries_path(run: RunSummary) -> Path | None:
    """The queries file a run generated from (manifest, else metrics.json); relative paths tried from the run dir."""
    raw = run.manifest.get("queries") or run.evaluation.get("queries")
    if not isinstance(raw, str) or not raw:
        return None
    path = Path(raw)
    if not path.is_absolute() and not path.is_file() and (run.run_dir / path).is_file():
        path = run.run_dir / path
    return path.resolve()


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


def sampling_tables(runs: Sequence[RunSummary]) -> list[SamplingTable]:
    """One table per pipeline that was run on at least two sample sets of the same images."""
    by_file: dict[Path, list[RunSummary]] = defaultdict(list)
    for r in runs:
        path = queries_path(r) if r.task == "image" else None
        if path is not None:
            by_file[path].append(r)
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
        names = sorted({name for p in per_set for name in p})
        for name in names:
            sets = [SampleSet(SET_LABEL.format(i), path, qids, sorted(p[name], key=RunSummary.sort_key))
                    for i, ((path, qids), p) in enumerate(zip(files, per_set, strict=True), start=1) if name in p]
            if len(sets) >= 2:
                tables.append(SamplingTable(pipeline=name, n_images=len(images), sets=sets))
    return tables


def set_labels(table: SamplingTable) -> list[str]:
    """The first column, one entry per row: the set's label on its first row, blank below (paper layout)."""
    return [s.label if i == 0 else "" for s in table.sets for i in range(len(s.runs))]


def legend(table: SamplingTable) -> str:
    """Which file each set is and how much the sets overlap (the paper: 1,030 of 5k captions in common)."""
    first = table.sets[0]
    parts = [f"{first.label}: {first.queries.name} ({len(first.qids)} captions)"]
    parts += [f"{s.label}: {s.queries.name} ({len(s.qids)} captions, {len(s.qids & first.qids)} in common "
              f"with {first.label})" for s in table.sets[1:]]
    return "; ".join(parts) + f". Every set has one caption for each of the same {table.n_images} images."


def markdown_sampling_table(table: SamplingTable) -> str:
    runs = table.runs
    cols = metric_columns("image", runs)
    lines = [f"### Image generation — {table.pipeline} on {len(table.sets)} caption sample sets", "",
             "| | k | " + " | ".join(header(c) for c in cols) + " |", "|---|---:|" + "---:|" * len(cols)]
    for label, r in zip(set_labels(table), runs, strict=True):
        lines.append(f"| {label} | {r.k} | " + " | ".join(cell(r, c) for c in cols) + " |")
    lines += ["", legend(table)]
    return "\n".join(lines) + "\n"


def csv_sampling_table(table: SamplingTable) -> str:
    """Every row names its set and queries file, so each number traces back to a run and a sample."""
    return csv_table("image", table.runs, ("sample_set", "queries"),
                     [(s.label, s.queries.name) for s in table.sets for _ in s.runs])
