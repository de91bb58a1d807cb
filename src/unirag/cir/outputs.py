"""What a CIR run writes around a :class:`~unirag.cir.pipeline.Search`'s ranking: rankings.jsonl,
metrics.json (each benchmark's metrics, averaged the way it reports them), manifest.json and the
files of the CIRR and CIRCO test servers:

* CIRR (https://cirr.cecs.anu.edu.au): two files, ``{"version": "rc2", "metric": "recall", "<pairid>":
  [top-50 image names], ...}`` and the same with ``"metric": "recall_subset"`` and the top-3 of the
  query's image set (reference removed).
* CIRCO (https://circo.micc.unifi.it): ``{"<query id>": [top-50 image ids as integers], ...}`` covering
  every test query.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from unirag.cir.datasets import CirDataset
from unirag.cir.pipeline import STAGE_NAMES, STAGES, Ranking, Search, stage_rankings
from unirag.errors import InputError
from unirag.metrics.cir import (
    CIRCO_RECALL_KS,
    MAP_KS,
    RECALL_KS,
    SUBSET_KS,
    map_mean,
    recall_mean,
    recall_subset_mean,
    subset_ranking,
    target_recall_mean,
)
from unirag.metrics.stats import DEFAULT_RESAMPLES, query_intervals_result
from unirag.runs.atomic import atomic_write_json, atomic_write_lines

METRIC_DEPTH = 50


def write_outputs(search: Search, ranking: Ranking, out: Path, bootstrap: dict[str, Any] | None = None
                  ) -> dict[str, Any]:
    """Write the run's files and return its metrics; ``ranking`` is what ``search`` found (its
    ``subsets``: the CIRR subset rankings of a separate pass, ``xr_cirr_subset = rerank``; None: each
    stage's full ranking cut to the img_set), ``bootstrap`` the keywords of the metrics' intervals
    (:func:`evaluate`)."""
    ds, xr, notes, s = search.ds, search.xr, search.notes, search.config.settings
    if xr.config.roles and "fine" in xr.stages and "xr_caption_verifier" in xr.settings.official_bugs():
        notes.append("reproduces the official caption-path verifier bug (bool(\"False\") is True: every "
                     "expected answer written as a string counts as True); set xr_caption_verifier=fixed "
                     "to score it right")
    qs, pool_ids, subset_passes = ranking.qs, ranking.pool_ids, ranking.subsets
    full = stage_rankings(qs, pool_ids)
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
        rec.update({name: v for name, v in (("scores", x.scores), ("notes", x.notes)) if v})
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

    manifest = {
        "dataset": {"name": ds.name, "kind": ds.kind, "images_root": str(ds.images_root),
                    "n_queries": len(ds.queries), "pool_size": len(ds.pool)},
        "config": xr.config.manifest(), "stages": list(xr.stages),
        "ablation": dict(vars(xr.ab)),
        "encoder": getattr(xr.encoder(), "name", None), "agent_calls": ranking.agent_calls,
        "cache_dir": str(xr.cache.dir), "settings": xr.settings.to_dict()}
    if search.official is not None:
        manifest["official_prompts"] = search.official.manifest()
    atomic_write_json(out / "manifest.json", {**manifest, "submissions": submissions, "notes": notes})
    return metrics


def write_submissions(kind: str, out_dir: str | Path, rankings: Mapping[str, Sequence[str]],
                      subset_rankings: Mapping[str, Sequence[str]] | None = None) -> list[Path]:
    """Write the server files for ``kind`` ("cirr" or "circo", every query's top 50); other benchmarks
    have no server."""
    if kind not in ("cirr", "circo"):
        return []
    for qid, ranked in rankings.items():
        if len(ranked) < 50:
            raise InputError(f"{kind.upper()} submission needs 50 results per query; query {qid} has {len(ranked)}")
    if kind == "circo":
        files = {"submission_circo.json": {str(q): [int(x) for x in r[:50]] for q, r in rankings.items()}}
    else:
        head, subsets = {"version": "rc2", "metric": "recall"}, subset_rankings or {}
        files = {"submission_cirr_recall.json": {**head, **{str(q): list(r[:50]) for q, r in rankings.items()}},
                 "submission_cirr_recall_subset.json": {**head, "metric": "recall_subset",
                                                        **{str(q): list(subsets.get(q, [])[:3]) for q in rankings}}}
    for name, obj in files.items():
        atomic_write_json(Path(out_dir) / name, obj)
    return [Path(out_dir) / name for name in files]


def evaluate(dataset: CirDataset, rankings: Mapping[str, Sequence[str]],
             subset_rankings: Mapping[str, Sequence[str]] | None = None, *, resamples: int = DEFAULT_RESAMPLES,
             bootstrap_seed: int = 0, method: str = "percentile") -> dict[str, Any]:
    """FashionIQ/M-BEIR: R@1/5/10/50; CIRR: + R_subset@1/2/3 and (R@5 + R_subset@1) / 2; CIRCO: mAP@k and
    R@k at 5/10/25/50 as its official script (target_img_id only), plus R_anyGT@k (any ground truth).

    Returns {"n_queries": ..., metric: value x100, "intervals": {metric: {"low", "high", "se"}}} (each
    metric's 95 % bootstrap interval over the queries, ``method`` "percentile" or "BCa", ``resamples``
    seeded by ``bootstrap_seed``; 0: no intervals), or a note when the split has no ground truth.
    """
    targets = {q.qid: q.targets for q in dataset.queries if q.targets and q.qid in rankings}
    if not targets:
        return {"n_queries": 0, "note": "no ground truth in this split (test set): use the submission files"}
    out: dict[str, Any] = {"n_queries": len(targets)}
    rows: dict[str, dict[str, float]] = {}
    if dataset.kind == "circo":
        out.update(map_mean(rankings, targets, MAP_KS, per_query=rows))
        # the one target recall counts: CIRCO's target_img_id, else the first ground truth
        out.update(target_recall_mean(rankings, {q.qid: q.target if q.target is not None else q.targets[0]
                                                 for q in dataset.queries if q.qid in targets},
                                      CIRCO_RECALL_KS, per_query=rows))
        out.update(recall_mean(rankings, targets, CIRCO_RECALL_KS, name="R_anyGT", per_query=rows))
    else:
        out.update(recall_mean(rankings, targets, RECALL_KS, per_query=rows))
    if dataset.kind == "cirr" and subset_rankings is not None:
        members = {q.qid: q.subset for q in dataset.queries if q.subset is not None}
        refs = {q.qid: q.reference for q in dataset.queries}
        out.update(recall_subset_mean(subset_rankings, {q: t[0] for q, t in targets.items()}, members, refs,
                                      SUBSET_KS, per_query=rows))
        out["avg(R@5,R_subset@1)"] = (out["R@5"] + out["R_subset@1"]) / 2
        # its interval resamples the queries that have both
        rows["avg(R@5,R_subset@1)"] = {q: (v + rows["R_subset@1"][q]) / 2 for q, v in rows["R@5"].items()
                                       if q in rows["R_subset@1"]}
    if resamples:  # each metric's interval (x100, as the figures) from its per-query values
        out["intervals"] = {}
        for name, values in rows.items():
            figure = {name: 100.0 * sum(values.values()) / max(1, len(values))}
            out["intervals"].update(query_intervals_result({q: {name: 100.0 * v} for q, v in values.items()}, figure,
                                                           resamples, bootstrap_seed, method)["intervals"])
    return out
