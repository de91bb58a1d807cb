"""Python API of composed image retrieval: one call per benchmark run.

    from unirag.cir.api import run_cir
    metrics = run_cir("cirr", ["cap.rc2.val.json"], images_root="CIRR", out_dir="runs/cirr",
                      agents="examples/xr_agents.yaml", k_prime=100, lam=0.5)

Several annotation files (FashionIQ's dress / shirt / toptee) each get their own sub-directory
and gallery; ``metrics.json`` at the top holds every file's metrics and their average, the way
FashionIQ is reported.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from unirag.cir.config import XRConfig, load_config
from unirag.cir.datasets import load_dataset
from unirag.cir.pipeline import STAGE_NAMES, STAGES, Ablation
from unirag.cir.xr import XR
from unirag.profiles import Settings
from unirag.runs.atomic import atomic_write_json


def run_cir(dataset: str, annotations: str | Path | Sequence[str | Path], *, images_root: str | Path | None,
            out_dir: str | Path, split_file: str | Path | None = None, agents: str | Path | XRConfig | None = None,
            k_prime: int | None = None, lam: float | None = None, k: int | None = None,
            stages: str | Sequence[str] = STAGES, limit: int | None = None, ablation: Ablation | None = None,
            cache_dir: str | Path | None = None, encoder: str | None = None, concurrency: int | None = None,
            exclude_reference: bool | None = None, profile: str | Settings | None = None,
            overrides: Mapping[str, Any] | None = None, official_prompts: str | Path | None = None,
            progress: bool = True, echo: Callable[[str], None] = print, engine: Any = "local",
            encoder_options: Mapping[str, Any] | None = None, bootstrap: Mapping[str, Any] | None = None,
            generator_factory: Any = None) -> dict[str, Any]:
    """Run the baseline and X^R stages on one or more annotation files with one :class:`~unirag.XR`
    (its encoders, agent models and Ray workers load once for all files); returns the metrics.

    ``profile``: ``"default"`` (the paper), ``"official"`` (the official X^R code, docs/xr-parity.md)
    or resolved :class:`~unirag.profiles.Settings`; None: the agents YAML's ``profile:``, else default.
    ``overrides``: single X^R settings on top (``{"xr_scoring": "official"}``; None values: not given).
    ``official_prompts``: the user's checkout of the official X^R code (read under xr_prompts=official).
    ``encoder_options``: ``device``/``dtype`` of the encoders; ``engine`` (its options' decode workers
    win over the agents YAML's setting), ``bootstrap``, ``generator_factory``: as :class:`~unirag.XR`
    and :meth:`~unirag.XR.run`.
    """
    config = load_config(agents, encoder=encoder, official_prompts=official_prompts, k_prime=k_prime, lam=lam, k=k,
                         concurrency=concurrency)
    settings = config.resolve_settings(profile, **dict(overrides or {}))
    if settings.profile != "default" or settings.overrides:
        bugs = settings.official_bugs()
        echo(f"profile {settings.profile}" + (f", overrides {', '.join(settings.overrides)}" if settings.overrides
                                             else "") + (f"; reproduces official bug(s): {', '.join(bugs)}"
                                                         if bugs else ""))

    once = functools.cache(echo)  # one notice per run, not one per annotation file
    files = [annotations] if isinstance(annotations, (str, Path)) else list(annotations)
    out = Path(out_dir)
    results: dict[str, dict[str, Any]] = {}
    with XR(config, work_dir=out, cache_dir=cache_dir, profile=settings, stages=stages, ablation=ablation,
            engine=engine, echo=once, progress=progress, generator_factory=generator_factory,
            **dict(encoder_options or {})) as xr:
        for f in files:
            keep = exclude_reference if exclude_reference is not None else (
                False if settings["xr_cirr_reference"] == "keep" else None)  # official: the reference stays ranked
            ds = load_dataset(dataset, f, images_root, split_file if len(files) == 1 else None, limit,
                              keep, query_text=settings["xr_query_text"],
                              cirr_val_limit=settings["xr_cirr_val_limit"])
            results[ds.name] = xr.run(ds, out if len(files) == 1 else out / ds.name, bootstrap=bootstrap)
    atomic_write_json(out / "profile.json", settings.to_dict())
    if len(files) == 1:
        return {**next(iter(results.values())), "profile": settings.to_dict()}
    summary: dict[str, Any] = {"datasets": results, "profile": settings.to_dict()}
    for stage in STAGE_NAMES.values():  # each numeric metric's mean (FashionIQ reports its three categories' mean)
        per = [m[stage] for m in results.values() if isinstance(m.get(stage), dict)]
        if per and len(per) == len(results):
            numeric = [k for k in per[0] if k != "n_queries" and all(isinstance(m.get(k), (int, float)) for m in per)]
            summary.setdefault("average", {})[stage] = {k: sum(m[k] for m in per) / len(per) for k in numeric}
    atomic_write_json(out / "metrics.json", summary)
    return summary
