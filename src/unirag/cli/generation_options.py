"""Options every generation command shares (caption, generate-images): one definition, one meaning."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from unirag.cli.model_options import DEVICE_HELP, DTYPE_HELP, DTYPES

_OPTIONS = [
    click.option("--base-url", default=None, help="API base URL (OpenAI-compatible local server, proxy). "
                 "Default: OPENAI_BASE_URL or the provider's."),
    click.option("--concurrency", type=int, default=4, show_default=True, help="API calls in flight at once."),
    click.option("--seed", type=int, default=0, show_default=True, help="Seed for random example selection."),
    click.option("--max-tokens", type=int, default=400, show_default=True, help="Output token limit (paper: 400)."),
    click.option("--timeout", type=float, default=None, help="Seconds per API call before it counts as failed."),
    click.option("--max-attempts", type=int, default=6, show_default=True,
                 help="Tries per query for transient errors (429, 5xx, timeouts)."),
    click.option("--device", default="auto", show_default=True, help="Local models: " + DEVICE_HELP),
    click.option("--dtype", type=click.Choice(DTYPES), default="auto", show_default=True,
                 help="Local models: " + DTYPE_HELP),
    click.option("--batch-size", type=int, default=None, help="Local models: prompts per forward pass."),
    click.option("--option", "option_pairs", multiple=True, metavar="KEY=VALUE",
                 help="A generator option (repeatable), as a grid's options: family=llava|gpt4o|gemini (the prompt "
                      "template family, e.g. llava for a LLaVA server), similarity=minilm|lexical "
                      "(retrieval:consensus), trust_remote_code=true (hf: models that ship their own modelling "
                      "code, e.g. InternVL3; off by default), quality=... (openai-image)."),
    click.option("--templates-dir", type=click.Path(file_okay=False), default=None,
                 help="Folder with your own prompt template files (default: the packaged ones)."),
    click.option("--prices", type=click.Path(dir_okay=False), default=None,
                 help="JSON/YAML price table overriding the paper's Table 8 defaults."),
    click.option("--save-prompts", type=int, default=5, show_default=True,
                 help="The first N prompts kept in OUT/prompts/: rendered (NNN_qid.txt, merged images) and exactly "
                      "as sent to the backend (NNN_qid.sent.txt: the text an hf: model receives, the JSON body "
                      "of an OpenAI-compatible or Gemini call), to diff against the official prompt_{idx}.txt "
                      "files."),
    click.option("--no-progress", is_flag=True, default=False, help="No progress bar."),
]



def generation_options(fn: Callable) -> Callable:
    for opt in reversed(_OPTIONS):
        fn = opt(fn)
    return fn


def key_values(values: tuple[str, ...], option: str, parse_value: bool) -> dict:
    """``--option``/``--generator`` ``KEY=VALUE`` items, split as ``--set`` splits them; ``parse_value``:
    the value read as YAML (``--option concurrency=8`` is a number, ``trust_remote_code=true`` a bool)."""
    import yaml

    from unirag.profiles import read_assignments

    return {key: (yaml.safe_load(value) if value else None) if parse_value else value
            for key, value in read_assignments(values, option)}


def generator_kwargs(opts: dict[str, Any]) -> dict[str, Any]:
    """Split the shared options into run-config fields and ``generator_options``."""
    from unirag.errors import ConfigError
    from unirag.generators.registry import GENERATOR_OPTIONS

    given = key_values(opts.get("option_pairs") or (), "--option", True)
    unknown = sorted(set(given) - GENERATOR_OPTIONS)
    if unknown:
        raise ConfigError(f"unknown --option {', '.join(unknown)}; known: {', '.join(sorted(GENERATOR_OPTIONS))}")
    gen = {**{k: opts[k] for k in sorted(GENERATOR_OPTIONS) if opts.get(k) is not None}, **given}
    return {"generator_options": gen, "concurrency": opts["concurrency"], "seed": opts["seed"],
            "max_tokens": opts["max_tokens"],
            "max_attempts": opts["max_attempts"], "templates_dir": opts["templates_dir"], "prices": opts["prices"],
            "save_prompts": opts["save_prompts"], "progress": not opts["no_progress"]}
