"""The options several commands share, one definition each, passed straight to the library, which
decides what they mean (what "auto" is: :mod:`unirag.runtime`; the engine: :mod:`unirag.runs.engine`):

* ``--device``/``--dtype``, M-BEIR ``--instructions``, ``--index-memory``: every command that runs a
  local model or searches an index;
* ``--engine``, ``--workers``, ``--gpus-per-worker``, ``--ray-address``: where a generation command's
  local model runs (caption, generate-images, cir, run); ``--decode-workers`` (:func:`decode_option`, on
  every command that decodes images for a model) arrives as the same options;
* the options of every run that calls a generator with examples (caption, generate-images);
* ``--resamples``, ``--bootstrap-seed``, ``--ci-method``: every command that reports 95 % intervals;
* ``--profile NAME`` and a repeatable ``--set NAME=VALUE``: how every command takes behaviour settings::

    @click.command("retrieve")
    @behaviour_options()
    def retrieve(..., settings: Settings, selection: Selection) -> None: ...

  One option for every setting of the settings table (:mod:`unirag.profiles`), instead of one flag
  per setting: ``--set xr_scoring=official --set temperature=none``. The names are the table's, the
  same a grid's ``settings:`` and the Python API take; values are read by the setting's declared type
  (:meth:`~unirag.profiles.Setting.coerce`). Commands that choose few-shot examples also take the
  example-selection names (``--set diversity=mmr --set filter=dataset=mscoco``, see
  :data:`unirag.profiles.SELECTION_NAMES`). An unknown name or a bad value fails before
  any work, as one line naming the known names or choices (exit 2). A given setting is recorded as an
  override in the run manifest.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import click

from unirag.runtime import DTYPE_CHOICES

DEVICE_HELP = "auto (CUDA GPU, else Apple MPS, else CPU), cpu, cuda, cuda:N or mps."
DTYPE_HELP = "auto (bfloat16/float16 on a GPU, float32 on CPU), float32, float16 (GPU only) or bfloat16."


def options(opts: list) -> Callable[[Callable], Callable]:
    """A decorator adding the click options ``opts``, in the order ``--help`` lists them."""
    return lambda fn: functools.reduce(lambda f, opt: opt(f), reversed(opts), fn)


def _device(prefix: str = "") -> list:
    """``--device`` and ``--dtype`` (both default "auto"), their help after ``prefix``."""
    return [click.option("--device", default="auto", show_default=True, help=prefix + DEVICE_HELP),
            click.option("--dtype", type=click.Choice(DTYPE_CHOICES), default="auto", show_default=True,
                         help=prefix + DTYPE_HELP)]


device_options = options(_device())


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


# --- the engine -----------------------------------------------------------------------------------------
#: The Ray workers' options: generation runs take them after ``--engine``, ``unirag index build`` as they are.
RAY_OPTIONS = [
    click.option("--workers", type=int, default=None,
                 help="Ray workers per model (default: GPUs / --gpus-per-worker, else the CPUs; "
                      "index build: the CPUs minus one)."),
    click.option("--gpus-per-worker", type=float, default=0, show_default=True,
                 help="GPUs Ray reserves for each worker (its model runs there; 0 = CPU)."),
    click.option("--ray-address", default=None,
                 help="Join this Ray cluster (head:6379 or ray://head:10001) instead of starting a local Ray; the "
                      "run folder, inputs and models must then be at the same paths on every node."),
]
_ENGINE = [
    click.option("--engine", type=click.Choice(["local", "ray"]), default="local", show_default=True,
                 help="local = this process; ray = local models (hf:, python:, diffusers:, lavit:, emu2-gen:) on "
                      "Ray workers, one model load per worker, into the same resumable run folder. API backends "
                      "always run here with --concurrency."),
    *RAY_OPTIONS,
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
    """Decorator: the engine options and the command's ``--decode-workers`` (its help for what it
    ``decodes``); the command gets them as ``engine``: one :class:`~unirag.runs.engine.EngineOptions`."""

    def decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args: Any, engine: str, decode: Any, **kwargs: Any) -> Any:
            ray = {k: kwargs.pop(k) for k in ("workers", "gpus_per_worker", "ray_address")}
            return fn(*args, engine=replace(decode, engine=engine, **ray), **kwargs)

        return options([*_ENGINE, decode_option(decodes)])(wrapper)
    return decorate


# --- generation runs ------------------------------------------------------------------------------------
#: The options of every run that calls a generator with examples (``run_options``): their values are the
#: run config's fields, as :func:`run_kwargs` hands them over.
_RUN = [
    click.option("--pool-images-root", type=click.Path(file_okay=False), default=None,
                 help="Folder the pool's (the examples') image paths are relative to (default: the --index's "
                      "recorded images root, else the queries' --images-root where the command has one)."),
    click.option("--retrieval", type=click.Path(dir_okay=False), default=None,
                 help="rag mode: a retrieval run file from `unirag retrieve`."),
    click.option("--index", type=click.Path(file_okay=False), default=None,
                 help="rag mode: retrieve on the fly from this index directory instead."),
    click.option("--pool", type=click.Path(dir_okay=False), default=None,
                 help="Candidate pool JSONL (random mode: the other queries' gold pairs)."),
    click.option("--out", required=True, type=click.Path(file_okay=False),
                 help="Run directory (rerun the same command to resume)."),
    click.option("--base-url", default=None, help="API base URL (OpenAI-compatible server, proxy, Gemini endpoint). "
                 "Default: OPENAI_BASE_URL or the provider's."),
    click.option("--concurrency", type=int, default=4, show_default=True, help="API calls in flight at once."),
    click.option("--timeout", type=float, default=None, help="Seconds per API call before it counts as failed."),
    click.option("--max-attempts", type=int, default=6, show_default=True,
                 help="Tries per query for transient errors (429, 5xx, timeouts)."),
    *_device("Local models: "),
    click.option("--prices", type=click.Path(dir_okay=False), default=None,
                 help="JSON/YAML price table overriding the default prices (captions: the paper's Table 8)."),
    click.option("--save-prompts", type=int, default=5, show_default=True,
                 help="The first N prompts kept in OUT/prompts/ for inspection (caption runs: rendered, NNN_qid.txt "
                      "with merged images, and exactly as sent to the backend, NNN_qid.sent.txt: the text an hf: "
                      "model receives, the JSON body of an OpenAI-compatible or Gemini call, to diff against the "
                      "official prompt_{idx}.txt files)."),
    click.option("--limit", type=int, default=None, help="Only the first N queries (a later full run extends it)."),
    click.option("--no-progress", is_flag=True, default=False, help="No progress bar."),
]
#: ``unirag caption``'s own.
_CAPTION = [
    click.option("--seed", type=int, default=0, show_default=True, help="Seed for random example selection."),
    click.option("--max-tokens", type=int, default=400, show_default=True, help="Output token limit (paper: 400)."),
    click.option("--batch-size", type=int, default=None, help="Local models: prompts per forward pass."),
    click.option("--option", "option_pairs", multiple=True, metavar="KEY=VALUE",
                 help="A generator option (repeatable), as a grid's options: family=llava|gpt4o|gemini (the prompt "
                      "template family, e.g. llava for a LLaVA server), similarity=minilm|lexical "
                      "(retrieval:consensus), trust_remote_code=true (hf: models that ship their own modelling "
                      "code, e.g. InternVL3; off by default), quality=... (openai-image)."),
    click.option("--templates-dir", type=click.Path(file_okay=False), default=None,
                 help="Folder with your own prompt template files (default: the packaged ones)."),
]


run_options = options(_RUN)
generation_options = options(_RUN + _CAPTION)


def key_values(values: tuple[str, ...], option: str, parse_value: bool) -> dict:
    """``--option``/``--generator`` ``KEY=VALUE`` items, split as ``--set`` splits them; ``parse_value``:
    the value read as YAML (``--option concurrency=8`` is a number, ``trust_remote_code=true`` a bool)."""
    import yaml

    from unirag.profiles import read_assignments

    return {key: (yaml.safe_load(value) if value else None) if parse_value else value
            for key, value in read_assignments(values, option)}


def run_kwargs(opts: dict[str, Any]) -> dict[str, Any]:
    """The run-config fields (``generator_options`` among them) of the options a command was given:
    every generator option that is set, ``--option KEY=VALUE`` over them."""
    from unirag.errors import ConfigError
    from unirag.generators.registry import GENERATOR_OPTIONS

    given = key_values(opts.get("option_pairs") or (), "--option", True)
    unknown = sorted(set(given) - GENERATOR_OPTIONS)
    if unknown:
        raise ConfigError(f"unknown --option {', '.join(unknown)}; known: {', '.join(sorted(GENERATOR_OPTIONS))}")
    gen = {**{k: opts[k] for k in sorted(GENERATOR_OPTIONS) if opts.get(k) is not None}, **given}
    rest = {k: v for k, v in opts.items() if k not in GENERATOR_OPTIONS | {"option_pairs", "no_progress"}}
    return {**rest, "generator_options": gen, "progress": not opts.get("no_progress")}


def bootstrap_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--resamples``, ``--bootstrap-seed`` and ``--ci-method``: how the 95 % intervals over queries are drawn."""
    from unirag.metrics.stats import DEFAULT_RESAMPLES, METHODS

    command = click.option("--ci-method", type=click.Choice(METHODS, case_sensitive=False), default="percentile",
                           show_default=True, help="Bootstrap interval: percentile or BCa.")(command)
    command = click.option("--bootstrap-seed", default=0, show_default=True,
                           help="Seed of the bootstrap resampling (and of the randomization test).")(command)
    return click.option("--resamples", default=DEFAULT_RESAMPLES, show_default=True, type=click.IntRange(min=0),
                        help="Bootstrap resamples of the queries for the 95 % intervals (0: no intervals).")(command)


# --- behaviour settings ---------------------------------------------------------------------------------
PROFILE_HELP = ("Named set of behaviour settings: default (the papers plus unirag's fixes) or official "
                "(the official code's behaviour); --set overrides single settings.")


def behaviour_options(selection: bool = True, raw: bool = False,
                      profile_help: str = PROFILE_HELP) -> Callable[[Callable], Callable]:
    """Decorator: ``--profile`` and ``--set``. The command gets ``settings`` (a resolved
    :class:`~unirag.profiles.Settings`), or with ``raw=True`` ``profile`` (None when not given) and
    ``setting_overrides`` (the settings given, unparsed but checked) to apply on top of something else
    (``unirag run``: every cell of a grid; ``unirag cir``: the agents YAML's profile). With
    ``selection`` it also gets ``selection`` (a :class:`~unirag.retrieval.selection.Selection`)."""
    from unirag.profiles import PROFILES, known_names, read_assignments, resolve, split_settings

    def decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            profile = kwargs.pop("profile", None)
            overrides, chosen = split_settings(read_assignments(kwargs.pop("set_items", ())), selection=selection)
            settings = resolve(profile or "default", **overrides)  # a bad value fails here, before any work
            if raw:
                kwargs["profile"], kwargs["setting_overrides"] = profile, overrides
            else:
                kwargs["settings"] = settings
            if selection:
                from unirag.retrieval.selection import selection_from_settings

                kwargs["selection"] = selection_from_settings(chosen)
            return fn(*args, **kwargs)

        wrapper = click.option("--set", "set_items", multiple=True, metavar="NAME=VALUE",
                               help="A behaviour setting over the profile, NAME=VALUE (repeatable), e.g. --set "
                                    f"xr_scoring=official; see docs/settings.md. Names: {known_names(selection)}.")(wrapper)
        return click.option("--profile", type=click.Choice(list(PROFILES)), default=None, help=profile_help)(wrapper)

    return decorate
