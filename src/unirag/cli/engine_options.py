"""``--engine``, ``--workers``, ``--gpus-per-worker``, ``--ray-address``: where a generation command's
local model runs (caption, generate-images, cir, run). One definition; the library decides the rest
(:mod:`unirag.runs.engine`). Each command also has one ``--decode-workers``
(:mod:`unirag.cli.model_options`), handed to :func:`engine_from_cli` for its Ray workers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

_OPTIONS = [
    click.option("--engine", type=click.Choice(["local", "ray"]), default="local", show_default=True,
                 help="local = this process; ray = local models (hf:, python:, diffusers:, lavit:, emu2-gen:) on "
                      "Ray workers, one model load per worker, into the same resumable run folder. API backends "
                      "always run here with --concurrency."),
    click.option("--workers", type=int, default=None,
                 help="Ray workers per model (default: GPUs / --gpus-per-worker, else the CPUs)."),
    click.option("--gpus-per-worker", type=float, default=0, show_default=True,
                 help="GPUs Ray reserves for each worker (its model runs there; 0 = CPU)."),
    click.option("--ray-address", default=None,
                 help="Join this Ray cluster (head:6379 or ray://head:10001) instead of starting a local Ray; the "
                      "run folder, inputs and models must then be at the same paths on every node."),
]

ENGINE_PARAMS = ("engine", "workers", "gpus_per_worker", "ray_address")


def engine_options(fn: Callable) -> Callable:
    for opt in reversed(_OPTIONS):
        fn = opt(fn)
    return fn


def engine_from_cli(opts: dict[str, Any], decode_workers: int | None = None):
    """Pop the engine options out of a command's keyword arguments -> :class:`EngineOptions`;
    ``decode_workers``: the command's ``--decode-workers`` (its Ray workers' decode processes)."""
    from unirag.runs.engine import EngineOptions

    values = {k: opts.pop(k) for k in ENGINE_PARAMS if k in opts}
    return EngineOptions(engine=values.get("engine") or "local", workers=values.get("workers"),
                         gpus_per_worker=values.get("gpus_per_worker") or 0, ray_address=values.get("ray_address"),
                         decode_workers=decode_workers)
