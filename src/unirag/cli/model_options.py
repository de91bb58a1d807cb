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


def options(opts: list) -> Callable[[Callable], Callable]:
    """A decorator adding the click options ``opts``, in the order ``--help`` lists them."""

    def decorate(fn: Callable) -> Callable:
        for opt in reversed(opts):
            fn = opt(fn)
        return fn
    return decorate


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
