"""Ground truth of generation runs: each query's positives, looked up in the candidate pool.

Caption runs are scored against *all* positive captions of an image query; image runs compare each
generated image with the query's positive image. Positives come from the qrels when given (M-BEIR's
authoritative judgements), else from the queries' ``pos_cand_list``. The pool is streamed and only
the needed candidates are kept, so the 5.5M-line global M-BEIR pool does not have to fit in memory.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from unirag.data.mbeir import read_candidates, read_qrels, read_queries
from unirag.data.records import Candidate, Qrels, Query
from unirag.errors import InputError
from unirag.runs.rundir import RunOutputs, read_run_dir


def positives(queries: Iterable[Query], qrels: Qrels | None = None) -> dict[str, list[str]]:
    """qid -> positive dids (qrels order is sorted for determinism; pos_cand_list keeps its order)."""
    out: dict[str, list[str]] = {}
    for q in queries:
        if qrels is not None:
            out[q.qid] = sorted(qrels.get(q.qid))
        else:
            out[q.qid] = list(q.pos_cand_list)
    return out


def load_needed_candidates(pool_path: str | Path, dids: set[str]) -> dict[str, Candidate]:
    found: dict[str, Candidate] = {}
    for c in read_candidates(pool_path):
        if c.did in dids:
            found[c.did] = c
    return found


def load_ground_truth(queries_path: str | Path, pool_path: str | Path, qrels_path: str | Path | None = None
                      ) -> tuple[dict[str, Query], dict[str, list[Candidate]]]:
    """(qid -> query, qid -> positive candidates found in the pool)."""
    queries = read_queries(queries_path)
    qrels = read_qrels(qrels_path) if qrels_path else None
    pos = positives(queries, qrels)
    pool = load_needed_candidates(pool_path, {d for ds in pos.values() for d in ds})
    by_qid = {q.qid: q for q in queries}
    return by_qid, {qid: [pool[d] for d in ds if d in pool] for qid, ds in pos.items()}


def reference_captions(cands: list[Candidate]) -> list[str]:
    return [c.txt for c in cands if c.txt]


def reference_image(cands: list[Candidate]) -> str | None:
    """The first positive that carries an image (M-BEIR text->image queries have exactly one)."""
    for c in cands:
        if c.img_path:
            return c.img_path
    return None


# the evaluation kind a scorer expects -> what to tell a user who passed the other kind of run
_WRONG_TASK = {"caption": "this is an image-generation run; use 'unirag evaluate images'",
               "image": "this is a caption run; use 'unirag evaluate captions'"}


def load_run_for_scoring(run_dir: str | Path, task: str, queries: str | Path, pool: str | Path,
                         qrels: str | Path | None = None
                         ) -> tuple[RunOutputs, dict[str, Query], dict[str, list[Candidate]]]:
    """The run, qid -> query and qid -> positive candidates, checked for the scorer of ``task``.

    Caption and image scoring both refuse a run of the other kind and outputs whose qids are not
    in ``queries`` (a wrong --queries file would otherwise score silently against nothing), so the
    checks live here once. A run whose manifest names no task (hand-made) is accepted.
    """
    run = read_run_dir(run_dir)
    if run.task not in (None, task):
        raise InputError(_WRONG_TASK[task], path=run.run_dir)
    by_qid, gt = load_ground_truth(queries, pool, qrels)
    unknown = [q for q in run.records if q not in by_qid]
    if unknown:
        raise InputError(f"{len(unknown)} output(s) have qids not in the queries file, e.g. {unknown[0]!r} "
                         "(wrong --queries?)", path=queries)
    return run, by_qid, gt
