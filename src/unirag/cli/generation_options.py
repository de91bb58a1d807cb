"""Options every generation command shares (caption, generate-images): one definition, one meaning."""

from __future__ import annotations

from typing import Any

import click

from unirag.cli.model_options import DEVICE_HELP, DTYPE_HELP, DTYPES, options

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
    click.option("--device", default="auto", show_default=True, help="Local models: " + DEVICE_HELP),
    click.option("--dtype", type=click.Choice(DTYPES), default="auto", show_default=True,
                 help="Local models: " + DTYPE_HELP),
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
