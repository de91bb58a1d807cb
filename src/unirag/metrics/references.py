"""Ground truth of generation runs and what every scorer reads and writes.

Caption runs are scored against *all* positive captions of an image query, image runs against its
positive image. The pool is streamed and only the needed candidates kept: the 5.5M-line global M-BEIR
pool need not fit in memory.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from unirag.data.mbeir import read_candidates, read_qrels, read_queries
from unirag.data.records import Candidate, Qrels, Query
from unirag.errors import InputError
from unirag.runs.rundir import METRICS_FILE, PER_QUERY_FILE, RunOutputs, read_run_dir


def positive_candidates(queries: Iterable[Query], pool_path: str | Path, qrels: Qrels | None = None
                        ) -> dict[str, list[Candidate]]:
    """qid -> its positive candidates found in the pool: from the qrels when given (sorted for
    determinism), else the query's ``pos_cand_list`` (in its order). Only those are kept from the pool."""
    pos = {q.qid: sorted(qrels.get(q.qid)) if qrels is not None else list(q.pos_cand_list) for q in queries}
    needed = {d for ds in pos.values() for d in ds}
    found = {c.did: c for c in read_candidates(pool_path) if c.did in needed}
    return {qid: [found[d] for d in ds if d in found] for qid, ds in pos.items()}


# the evaluation kind a scorer expects -> what to tell a user who passed the other kind of run
_WRONG_TASK = {"caption": "this is an image-generation run; use 'unirag evaluate images'",
               "image": "this is a caption run; use 'unirag evaluate captions'"}


def load_run_for_scoring(run_dir: str | Path, task: str, queries: str | Path, pool: str | Path,
                         qrels: str | Path | None, profile: Any
                         ) -> tuple[Any, RunOutputs, dict[str, Query], dict[str, list[Candidate]]]:
    """The settings of ``profile``, the run, qid -> query and qid -> positive candidates, checked for the
    scorer of ``task``: a run of the other kind is refused (one without a task, hand-made, is accepted), and
    so are outputs whose qids are not in ``queries`` (a wrong --queries file would otherwise score silently
    against nothing)."""
    from unirag.profiles import resolve

    settings = resolve(profile)
    run = read_run_dir(run_dir)
    if run.task not in (None, task):
        raise InputError(_WRONG_TASK[task], path=run.run_dir)
    read = read_queries(queries)
    gt = positive_candidates(read, pool, read_qrels(qrels) if qrels else None)
    by_qid = {q.qid: q for q in read}
    unknown = [q for q in run.records if q not in by_qid]
    if unknown:
        raise InputError(f"{len(unknown)} output(s) have qids not in the queries file, e.g. {unknown[0]!r} "
                         "(wrong --queries?)", path=queries)
    return settings, run, by_qid, gt


def scores_result(run: RunOutputs, by_qid: dict[str, Query], n_scored: int, per_query: Iterable[dict[str, Any]] | None,
                  *, task: str, metrics: dict[str, float], intervals: dict[str, Any], skipped: dict[str, str],
                  settings: Any, queries: str | Path, pool: str | Path, **entries: Any) -> dict[str, Any]:
    """What every scorer's metrics.json holds: the metrics, their intervals and the skipped ones; the counts
    of queries, scored, failed (the first 20 failed qids) and without output yet; the profile and inputs;
    then the scorer's own ``entries``. Unless ``per_query`` is None, ``metrics_per_query.jsonl`` (its
    records), then ``metrics.json`` are written into the run folder (each atomically)."""
    failed = run.failed()
    result = {"task": task, "metrics": metrics, **intervals, "skipped_metrics": skipped, "n_queries": len(by_qid),
              "n_scored": n_scored, "n_failed": len(failed), "n_missing": sum(1 for q in by_qid if q not in run.records),
              "failed_qids": sorted(failed)[:20], "profile": settings.to_dict(), "queries": str(queries),
              "pool": str(pool), **entries}
    if per_query is not None:
        from unirag.runs.atomic import atomic_write_json, atomic_write_lines

        atomic_write_lines(run.run_dir / PER_QUERY_FILE, (json.dumps(r, ensure_ascii=False) for r in per_query))
        atomic_write_json(run.run_dir / METRICS_FILE, result)
    return result
