"""Submission files for the CIRR and CIRCO test servers, in the formats the servers accept.

* CIRR (https://cirr.cecs.anu.edu.au): two files, ``{"version": "rc2", "metric": "recall", "<pairid>":
  [top-50 image names], ...}`` and the same with ``"metric": "recall_subset"`` and the top-3 of the
  query's image set (reference removed).
* CIRCO (https://circo.micc.unifi.it): ``{"<query id>": [top-50 image ids as integers], ...}`` covering
  every test query.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from unirag.errors import InputError
from unirag.runs.atomic import atomic_write_json


def cirr_submissions(rankings: Mapping[str, Sequence[str]], subset_rankings: Mapping[str, Sequence[str]]
                     ) -> tuple[dict, dict]:
    recall = {"version": "rc2", "metric": "recall"}
    subset = {"version": "rc2", "metric": "recall_subset"}
    for qid, ranked in rankings.items():
        if len(ranked) < 50:
            raise InputError(f"CIRR submission needs 50 results per query; query {qid} has {len(ranked)}")
        recall[str(qid)] = list(ranked[:50])
        subset[str(qid)] = list(subset_rankings.get(qid, [])[:3])
    return recall, subset


def circo_submission(rankings: Mapping[str, Sequence[str]]) -> dict[str, list[int]]:
    out = {}
    for qid, ranked in rankings.items():
        if len(ranked) < 50:
            raise InputError(f"CIRCO submission needs 50 results per query; query {qid} has {len(ranked)}")
        out[str(qid)] = [int(x) for x in ranked[:50]]
    return out


def write_submissions(kind: str, out_dir: str | Path, rankings: Mapping[str, Sequence[str]],
                      subset_rankings: Mapping[str, Sequence[str]] | None = None) -> list[Path]:
    """Write the server files for ``kind`` ("cirr" or "circo"); other benchmarks have no server."""
    out_dir = Path(out_dir)
    written = []
    if kind == "cirr":
        recall, subset = cirr_submissions(rankings, subset_rankings or {})
        for name, obj in (("submission_cirr_recall.json", recall), ("submission_cirr_recall_subset.json", subset)):
            atomic_write_json(out_dir / name, obj)
            written.append(out_dir / name)
    elif kind == "circo":
        atomic_write_json(out_dir / "submission_circo.json", circo_submission(rankings))
        written.append(out_dir / "submission_circo.json")
    return written
