"""Options of every command that runs a local model: ``--device``/``--dtype``, ``--decode-workers``, M-BEIR
``--instructions``, and ``--index-memory`` for the commands that search an index.

One definition each, passed straight to the library (``load_encoder(spec, device=, dtype=)``, the
generator factories), which decides what "auto" means (:mod:`unirag.runtime`).
"""

from __future__ import annotations

from collections.abc import Callable

import click

DEVICE_HELP = "auto (CUDA GPU, else Apple MPS, else CPU), cpu, cuda, cuda:N or mps."
DTYPE_HELP = "auto (bfloat16/float16 on a GPU, float32 on CPU), float32, float16 (GPU only) or bfloat16."
DTYPES = ("auto", "float32", "float16", "bfloat16")


def device_options(fn: Callable) -> Callable:
    """``--device`` and ``--dtype`` (both default "auto")."""
    fn = click.option("--dtype", type=click.Choice(DTYPES), default="auto", show_default=True, help=DTYPE_HELP)(fn)
    return click.option("--device", default="auto", show_default=True, help=DEVICE_HELP)(fn)


def instruction_options(fn: Callable) -> Callable:
    """``--instructions FILE`` / ``--no-instructions`` for UniIR encoders (ignored by other encoders)."""
    fn = click.option("--no-instructions", "no_instructions", is_flag=True, default=False,
                      help="UniIR encoders: encode queries without M-BEIR instructions.")(fn)
    return click.option("--instructions", "instructions", type=click.Path(dir_okay=False), default=None,
                        help="UniIR encoders: M-BEIR query_instructions.tsv (default: instructions/ next to the "
                             "queries' M-BEIR root, found by walking up from the queries file).")(fn)


def index_memory_option(fn: Callable, default: str = "mmap", extra: str = "") -> Callable:
    """``--index-memory mmap|ram`` (see :meth:`unirag.Index.open`)."""
    choices = ("mmap", "ram") + (("auto",) if default == "auto" else ())
    return click.option("--index-memory", "index_memory", type=click.Choice(choices), default=default,
                        show_default=True,
                        help="mmap: memory-map the FAISS files (instant open); ram: read them into memory at open "
                             "(exact batched search at in-RAM FAISS speed)" + extra + ".")(fn)


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
             "decode_workers=N): auto (each cell's own decode_workers option, else auto) or N; 0 = in the "
             "model's process; " + RAY_DECODE_HELP + "."),
}


def decode_workers_option(what: str = "encoder") -> Callable[[Callable], Callable]:
    """``--decode-workers auto|N`` (see :mod:`unirag.data.loader`), its help for ``what`` it decodes."""
    from unirag.data.loader import resolve_decode_workers

    def convert(ctx, param, value):
        from unirag.errors import ConfigError

        try:
            return resolve_decode_workers(value)
        except ConfigError as e:
            raise click.BadParameter(str(e)) from None

    return click.option("--decode-workers", default="auto", show_default=True, callback=convert,
                        help=DECODE_HELP[what])
