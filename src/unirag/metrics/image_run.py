"""Score the generated images of a run directory: FID and IS (when possible) and CLIP Score.

A generated image is matched with the real positive image of the same query for FID and with the
query's caption for CLIP Score. A metric that cannot run here (no torch-fidelity, no weights) is
skipped with one line; the others still run.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from unirag.data.records import resolve_image
from unirag.errors import InputError
from unirag.metrics.images import DEFAULT_CLIP_MODEL, frechet_interval, image_metrics, inception_from_logits
from unirag.metrics.references import load_run_for_scoring, scores_result
from unirag.metrics.stats import DEFAULT_RESAMPLES, bootstrap_interval, query_intervals_result, shifted
from unirag.runs.rundir import OUTPUTS_FILE

#: FID's and IS's intervals recompute the whole figure per resample: at most this many resamples on a
#: GPU, and :data:`FID_MAX_RESAMPLES_CPU` on the CPU (a 2048-dimensional Fréchet distance takes seconds there).
FID_MAX_RESAMPLES = 200
FID_MAX_RESAMPLES_CPU = 50


def evaluate_image_run(run_dir: str | Path, queries: str | Path, pool: str | Path, images_root: str | Path, *,
                       qrels: str | Path | None = None, inception_weights: str | Path | None = None,
                       clip_model: str | Path | None = DEFAULT_CLIP_MODEL, fid_feature: Any = None,
                       is_feature: Any = None, clip: tuple[Any, Any] | None = None, is_splits: int = 10,
                       seed: int = 0, batch_size: int = 32, device: str | None = None, write: bool = True,
                       show_progress: bool = False, engine: Any = None,
                       resamples: int = DEFAULT_RESAMPLES, bootstrap_seed: int = 0,
                       ci_method: str = "percentile", profile: Any = None) -> dict[str, Any]:
    """Metrics of an image run; writes ``metrics.json`` and per-query CLIP scores into ``run_dir``.

    Failed queries are excluded and counted (``profile``'s ``image_metric_missing=noise``: scored as
    random noise, as the official evaluation does; ``image_metric_channels`` / ``image_metric_size``: its
    BGR 224x224 inputs, 299x299 for IS). ``intervals``: 95 % bootstrap intervals over the queries
    (``resamples`` seeded by ``bootstrap_seed``; 0: none), FID's from resampled pairs of real and
    generated features and IS's from resampled logits (at most :data:`FID_MAX_RESAMPLES` of them, the
    spread centred on the measured figure). The other arguments: see :func:`~unirag.metrics.images.image_metrics`.
    """
    settings, run, by_qid, gt = load_run_for_scoring(run_dir, "image", queries, pool, qrels, profile)
    noise = settings["image_metric_missing"] == "noise"
    outputs_path = run.run_dir / OUTPUTS_FILE
    qids, fakes, reals, texts = [], [], [], []
    no_real = noised = 0
    ok = run.ok()
    for qid in by_qid:
        rec = ok.get(qid)
        if rec is None and not noise:
            continue
        fake = None
        if rec is not None:
            fake = resolve_image(rec.get("image"), run.run_dir) if isinstance(rec.get("image"), str) else None
            if fake is None or not fake.is_file():
                raise InputError("status ok but no image path" if fake is None else f"generated image not found: {fake}",
                                 path=outputs_path, line=run.lines[qid], field="image")
        real = next((c.img_path for c in gt[qid] if c.img_path), None)  # M-BEIR text->image queries have one
        no_real += rec is not None and real is None
        if real is None and not noise:
            continue
        noised += (rec is None) + (real is None)  # the official evaluation scores a missing image as noise
        qids.append(qid)
        fakes.append(fake)
        reals.append(resolve_image(real, images_root) if real is not None else None)
        texts.append(by_qid[qid].txt or "")
    if not qids:
        raise InputError(f"no successful images with a real positive image to compare ({len(run.failed())} failed)",
                         path=outputs_path)
    fid_rows: list[Any] | None = [] if resamples else None
    is_rows: list[Any] | None = [] if resamples else None
    is_images = None
    channels, size = settings["image_metric_channels"], settings["image_metric_size"]
    if channels != "rgb" or size is not None or noise:  # the official inputs: arrays, prepared as its script does
        from unirag.metrics.images import official_arrays, opencv

        fakes = official_arrays(fakes, channels=channels, size=size, seed=seed)
        reals = official_arrays(reals, channels=channels, size=size, seed=seed + 1)
        if size is not None:  # IS sees 299x299 copies of the 224 images (eval_image_generation.py@e9a4e00:173)
            is_images = [opencv().resize(a, (299, 299)) for a in fakes]
    metrics = image_metrics(fakes, texts, reals, clip_model=clip_model, clip=clip, fid_feature=fid_feature,
                            is_feature=is_feature, inception_weights=inception_weights, is_splits=is_splits,
                            seed=seed, batch_size=batch_size, device=device, per_item=True,
                            engine=engine, show_progress=show_progress,
                            fid_features=fid_rows, is_features=is_rows, is_images=is_images)
    skipped, scores = metrics.pop("skipped"), metrics.pop("per_item")
    per_query = dict(zip(qids, scores, strict=True)) if scores else {}
    intervals = query_intervals_result({q: {"CLIP Score": s} for q, s in per_query.items()}, metrics, resamples,
                                       bootstrap_seed, ci_method)
    import torch

    on_gpu = (device or ("cuda" if torch.cuda.is_available() else "cpu")) != "cpu"
    whole = min(resamples, FID_MAX_RESAMPLES if on_gpu else FID_MAX_RESAMPLES_CPU)
    whole_figure: dict[str, Any] = {}  # FID and IS: the resampled figures' spread around the measured one
    if intervals and fid_rows is not None and len(fid_rows) == 2 and len(fid_rows[0]) == len(fid_rows[1]):
        whole_figure["FID"] = frechet_interval(*fid_rows, n_resamples=whole, seed=bootstrap_seed, device=device)
    if intervals and is_rows and "IS" in metrics:
        ci = bootstrap_interval(is_rows[0], functools.partial(inception_from_logits, splits=is_splits),
                                n_resamples=whole, seed=bootstrap_seed, method="centred")
        # centred on the reported IS, whose random split differs from the rows' order
        whole_figure["IS"] = shifted(ci, metrics["IS"] - float(inception_from_logits(is_rows[0], is_splits)))
    for name, ci in whole_figure.items():
        if ci is not None:
            intervals["intervals"][name] = ci.as_dict()
            intervals["bootstrap"][name.lower()] = {"method": "centred", "n_resamples": whole}
    return scores_result(run, by_qid, len(qids),
                         ({"qid": q, "CLIP Score": s} for q, s in per_query.items()) if write else None,
                         task="image", metrics=metrics, intervals=intervals, skipped=skipped, settings=settings,
                         queries=queries, pool=pool, n_no_real_image=no_real, n_noise_images=noised,
                         fid_feature="injected" if fid_feature is not None else "inception-v3-compat (torch-fidelity)",
                         clip_model="injected" if clip is not None else (str(clip_model) if clip_model else None),
                         is_splits=is_splits, seed=seed, images_root=str(images_root))
