"""What a CIR run writes: rankings.jsonl, metrics.json, stage outputs, submission files, manifest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from unirag.cir.datasets import CirDataset
from unirag.cir.evaluation import evaluate
from unirag.cir.stages import STAGE_NAMES, STAGES
from unirag.cir.submission import write_submissions
from unirag.metrics.cir import subset_ranking
from unirag.runs.atomic import atomic_write_json, atomic_write_lines

METRIC_DEPTH = 50


def stage_rankings(qs, pool_ids: list[str], stage_order: tuple[str, ...]) -> dict[str, dict[str, list[str]]]:
    """stage -> qid -> full ranking of image ids; a query lacking a stage falls back to the stage before."""
    out: dict[str, dict[str, list[str]]] = {}
    present = [st for st in stage_order if any(st in x.orders for x in qs)]
    for st in present:
        per_q = {}
        for x in qs:
            chain = [c for c in stage_order[: stage_order.index(st) + 1] if c in x.orders]
            order = x.orders[chain[-1]]
            per_q[x.q.qid] = [pool_ids[i] for i in x.cand[order]]
        out[st] = per_q
    return out


def write_outputs(ds: CirDataset, out: Path, ranking, s, notes: list[str], manifest: dict[str, Any],
                  bootstrap: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write the run's files; ``ranking`` is what :meth:`unirag.cir.pipeline.CirRun.search` found (its
    ``subsets``: the CIRR subset rankings of a separate pass, ``xr_cirr_subset = rerank``; None: each
    stage's full ranking cut to the img_set), ``notes`` the run's notes (appended to), ``manifest``
    what the run records about its configuration (stages, encoder, agent calls...), ``bootstrap`` the
    keywords of the metrics' intervals (:func:`unirag.cir.evaluation.evaluate`)."""
    qs, pool_ids, subset_passes = ranking.qs, ranking.pool_ids, ranking.subsets
    full = stage_rankings(qs, pool_ids, STAGES)
    final_stage = [st for st in STAGES if st in full][-1]
    depth = max(s.k, METRIC_DEPTH)
    if subset_passes is not None:
        subsets = {st: subset_passes.get(st, {}) for st in full}
    else:
        subsets = {st: {x.q.qid: subset_ranking(r[x.q.qid], x.q.subset, x.q.reference)
                        for x in qs if x.q.subset is not None} for st, r in full.items()}
    lines = []
    for x in qs:
        qid = x.q.qid
        rec: dict[str, Any] = {
            "qid": qid, "reference": x.q.reference, "text": x.q.text, "targets": x.q.targets,
            "ranked": full[final_stage][qid][: s.k], "final_stage": STAGE_NAMES[final_stage],
            "stages": {STAGE_NAMES[st]: r[qid][:depth] for st, r in full.items()},
        }
        if x.q.subset is not None:
            rec["subset_ranked"] = {STAGE_NAMES[st]: v.get(qid, []) for st, v in subsets.items()}
        if x.imag_t or x.imag_v:
            rec["imagination"] = {"text": x.imag_t, "vision": x.imag_v}
        if x.statements is not None:
            rec["statements"] = x.statements
        if x.scores:
            rec["scores"] = x.scores
        if x.notes:
            rec["notes"] = x.notes
        lines.append(json.dumps(rec, ensure_ascii=False))
    atomic_write_lines(out / "rankings.jsonl", lines)

    submissions = []
    if ds.kind in ("cirr", "circo"):
        final = {q: v[:depth] for q, v in full[final_stage].items()}
        if len(pool_ids) - (1 if ds.exclude_reference else 0) >= METRIC_DEPTH:
            submissions = [str(p) for p in write_submissions(ds.kind, out, final, subsets.get(final_stage))]
        else:
            notes.append("submission files skipped: the pool has fewer than 50 candidates")
    metrics: dict[str, Any] = {"dataset": ds.name, "final_stage": STAGE_NAMES[final_stage],
                               "n_queries_run": len(qs), "pool_size": len(pool_ids)}
    for st, r in full.items():
        metrics[STAGE_NAMES[st]] = evaluate(ds, {q: v[:depth] for q, v in r.items()}, subsets.get(st),
                                            **(bootstrap or {}))
    if notes:
        metrics["notes"] = notes
    atomic_write_json(out / "metrics.json", metrics)

    atomic_write_json(out / "manifest.json", {
        "dataset": {"name": ds.name, "kind": ds.kind, "images_root": str(ds.images_root),
                    "n_queries": len(ds.queries), "pool_size": len(ds.pool)},
        **manifest, "submissions": submissions, "notes": notes,
    })
    return metrics
