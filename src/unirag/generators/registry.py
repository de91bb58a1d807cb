"""Caption (text) generators by spec string: ``PREFIX:NAME``.

``openai:gpt-4o``                chat completions (any OpenAI-compatible server with ``base_url``)
``gemini:gemini-1.5-pro``        Google Gemini through ``google-genai``
``hf:llava-hf/llava-1.5-7b-hf``  a local Hugging Face VLM (hub id or local directory)
``retrieval:top1``               the top-1 retrieved caption (paper rows 1a/1b); no model
``retrieval:consensus``          the retrieved caption most similar to the other top-k ones
``python:pkg.module:factory``    whatever generator object ``factory(**options)`` returns (plugin.py)

Options are passed as keyword arguments; each backend takes the ones it understands and the
rest are ignored, so one CLI option set (``--base-url``, ``--device``, ...) serves every backend.
Backends are imported only when selected (the SDKs and torch are heavy).
"""

from __future__ import annotations

from typing import Any

from unirag.errors import ConfigError
from unirag.generators.base import CaptionBackend
from unirag.generators.spec import BackendTable, build_backend, parse_backend_spec

# prefix -> ("module:class", what NAME means)
BACKENDS: BackendTable = {
    "openai": ("unirag.generators.openai_compat:OpenAIChatGenerator", "model name, e.g. openai:gpt-4o"),
    "gemini": ("unirag.generators.gemini:GeminiGenerator", "model name, e.g. gemini:gemini-1.5-pro"),
    "hf": ("unirag.generators.hf_vlm:HFVisionLanguageGenerator",
           "hub id or local dir, e.g. hf:llava-hf/llava-1.5-7b-hf"),
    "retrieval": ("unirag.generators.retrieval_baseline:RetrievalCaptioner", "top1 or consensus"),
    "python": ("unirag.generators.plugin:PluginTextGenerator", "module:factory, e.g. python:mypkg.gen:make"),
}

FAMILIES = ("llava", "gpt4o", "gemini")


def parse_spec(spec: str) -> tuple[str, str]:
    """``'openai:gpt-4o'`` -> ``('openai', 'gpt-4o')``; unknown prefixes raise ConfigError."""
    return parse_backend_spec(spec, BACKENDS, "generator")


def load_text_generator(spec: str, **opts: Any) -> CaptionBackend:
    """Build the generator a spec names. Options set to None are treated as not given.

    Common options: ``base_url``, ``timeout``, ``family`` (prompt template family override, e.g.
    ``llava`` for a LLaVA model served through an OpenAI-compatible server), ``device``, ``dtype``,
    ``batch_size``, ``api_key_env``. Secrets are never options: keys come from the environment.
    """
    prefix, name = parse_spec(spec)
    family = opts.get("family")
    if family is not None and family not in FAMILIES:
        raise ConfigError(f"unknown prompt family {family!r}; expected one of {', '.join(FAMILIES)}")
    return build_backend(prefix, name, BACKENDS, opts)


def available_prefixes() -> list[str]:
    return list(BACKENDS)
