"""``--engine``, ``--workers``, ``--gpus-per-worker``, ``--ray-address``: where a generation command's
local model runs (caption, generate-images, cir, run). One definition; the library decides the rest
(:mod:`unirag.runs.engine`). Each command also has one ``--decode-workers``
(:mod:`unirag.cli.model_options`), which :func:`engine_from_cli` puts in the same options."""

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

ENGINE_PARAMS = ("engine", "workers", "gpus_per_worker", "ray_address", "decode_workers")


def engine_options(decodes: str) -> Callable[[Callable], Callable]:
    """The engine options and the command's ``--decode-workers`` (its help for what it ``decodes``)."""
    from unirag.cli.model_options import decode_workers_option

    def add(fn: Callable) -> Callable:
        for opt in reversed([*_OPTIONS, decode_workers_option(decodes)]):
            fn = opt(fn)
        return fn
    return add


def engine_from_cli(opts: dict[str, Any]):
    """Pop the engine options (and ``--decode-workers``) out of a command's keyword arguments ->
    :class:`EngineOptions`."""
    from unirag.runs.engine import EngineOptions

    values = {k: opts.pop(k) for k in ENGINE_PARAMS if k in opts}
    return EngineOptions(**{**values, "engine": values.get("engine") or "local",
                            "gpus_per_worker": values.get("gpus_per_worker") or 0})
