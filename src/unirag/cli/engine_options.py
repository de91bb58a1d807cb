"""``--engine``, ``--workers``, ``--gpus-per-worker``, ``--ray-address``: where a generation command's
local model runs (caption, generate-images, cir, run). One definition; the library decides the rest
(:mod:`unirag.runs.engine`). ``--decode-workers`` (:func:`decode_option`, on every command that decodes
images for a model) is defined here too: it arrives as the same options."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from unirag.cli.model_options import options

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

#: With ``--engine ray``: the Ray workers' part (see :class:`unirag.runs.engine.EngineOptions`).
RAY_DECODE_HELP = ("with --engine ray, per Ray worker: processes that decode the images of the worker's "
                   "next call while its model works (auto: the CPUs per GPU worker less one, at most 8; "
                   "0 for CPU-only workers)")
_AUTO = "auto (the cores available to this process, at most 8; "

#: Each command's ``--decode-workers`` help, by what its decode processes decode.
DECODE_HELP = {
    "encoder": ("Processes that decode and preprocess images ahead of the encoder: " + _AUTO
                + "small jobs inline) or N; 0 = in the model's process."),
    "caption": ("Local models: processes that decode the next batches' query and example images while the "
                "model captions: " + _AUTO + "runs of fewer than 128 images inline) or N; 0 = in the model's "
                "process; " + RAY_DECODE_HELP + "."),
    "image": ("Local models: processes that decode the next queries' example images while the model draws: "
              + _AUTO + "runs of fewer than 128 example images inline) or N; 0 = in the model's process; "
              + RAY_DECODE_HELP + "."),
    "agent": ("Agent roles played by a local hf: model: processes that decode the next calls' images while "
              "the model answers: " + _AUTO + "fewer than 128 images inline) or N; 0 = in the model's "
              "process; " + RAY_DECODE_HELP + ". API roles send the files as they are."),
    "metric": ("Processes that decode the generated and real images ahead of the Inception and CLIP "
               "networks: " + _AUTO + "fewer than 128 images inline) or N; 0 = in this process."),
    "grid": ("Every cell: processes that decode the next calls' images while a local model works (caption, "
             "image and X^R cells; as --decode-workers of caption, generate-images and cir, and --option "
             "decode_workers=N): auto (each cell's own option, else auto) or N; 0 = in the "
             "model's process; " + RAY_DECODE_HELP + "."),
}


def decode_option(decodes: str = "encoder") -> Callable[[Callable], Callable]:
    """``--decode-workers auto|N`` (see :mod:`unirag.data.loader`), its help for what it ``decodes``; the
    command gets it as ``decode``: :class:`~unirag.runs.engine.EngineOptions` holding the setting."""

    def convert(ctx, param, value):
        from unirag.errors import ConfigError
        from unirag.runs.engine import EngineOptions

        try:
            return EngineOptions(decode_workers=value)
        except ConfigError as e:
            raise click.BadParameter(str(e)) from None

    return click.option("--decode-workers", "decode", default="auto", show_default=True, callback=convert,
                        help=DECODE_HELP[decodes])


def engine_options(decodes: str) -> Callable[[Callable], Callable]:
    """The engine options and the command's ``--decode-workers`` (its help for what it ``decodes``)."""

    return options([*_OPTIONS, decode_option(decodes)])


def engine_from_cli(opts: dict[str, Any]):
    """Pop the engine options (and ``--decode-workers``) out of a command's keyword arguments ->
    :class:`EngineOptions`."""
    from dataclasses import replace

    from unirag.runs.engine import EngineOptions

    values = {k: opts.pop(k) for k in ("engine", "workers", "gpus_per_worker", "ray_address") if k in opts}
    values.update(engine=values.get("engine") or "local", gpus_per_worker=values.get("gpus_per_worker") or 0)
    return replace(opts.pop("decode", None) or EngineOptions(), **values)
