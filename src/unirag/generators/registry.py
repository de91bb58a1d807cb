"""Generators of both kinds, caption (text) and image, by spec string ``PREFIX:NAME`` (:data:`BACKENDS`).

Both kinds are named, parsed and built the same way, so that lives here once with the option rules:
each backend takes the options its constructor declares and the rest are dropped, so one CLI option
set (``--base-url``, ``--device``, ...) serves every backend. Backends are imported only when selected
(the SDKs and torch are heavy). Secrets are never options: keys come from the environment.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from unirag.errors import ConfigError
from unirag.profiles import resolve

CAPTION = "generator"
IMAGE = "image generator"
_PLUGIN = "module:factory, e.g. python:mypkg.gen:make"
# kind -> prefix -> ("module:class", what NAME means: the error for a bad spec lists it); "python": a plugin
BACKENDS: dict[str, dict[str, tuple[str, str]]] = {
    CAPTION: {
        "openai": ("unirag.generators.openai_compat:OpenAIChatGenerator", "model name, e.g. openai:gpt-4o"),
        "gemini": ("unirag.generators.gemini:GeminiGenerator", "model name, e.g. gemini:gemini-1.5-pro"),
        "hf": ("unirag.generators.hf_vlm:HFVisionLanguageGenerator",
               "hub id or local dir, e.g. hf:llava-hf/llava-1.5-7b-hf"),
        "retrieval": ("unirag.generators.retrieval_baseline:RetrievalCaptioner", "top1 or consensus"),
        "python": ("unirag.generators.plugin:PluginTextGenerator", _PLUGIN),
    },
    IMAGE: {
        "diffusers": ("unirag.generators.images.diffusers_backend:DiffusersImageGenerator",
                      "hub id or local pipeline dir, e.g. diffusers:./my-sd-pipeline"),
        "openai-image": ("unirag.generators.openai_compat:OpenAIImageGenerator",
                         "model name, e.g. openai-image:gpt-image-1"),
        "gemini-image": ("unirag.generators.gemini:GeminiImageGenerator",
                         "model name, e.g. gemini-image:gemini-2.5-flash-image"),
        "retrieval": ("unirag.generators.retrieval_baseline:RetrievalImageGenerator", "top1"),
        "lavit": ("unirag.generators.images.lavit:LaVITImageGenerator",
                  "LaVIT checkpoint dir, e.g. lavit:./LaVIT-7B-v2"),
        "emu2-gen": ("unirag.generators.images.emu2:Emu2GenImageGenerator",
                     "Emu2-Gen pipeline dir or hub id, e.g. emu2-gen:BAAI/Emu2-Gen"),
        "python": ("unirag.generators.plugin:PluginImageGenerator", _PLUGIN),
    },
}
FAMILIES = ("llava", "gpt4o", "gemini")

#: Options a caption or image run passes to the generator it loads (``--base-url``, ``--device``, ...).
GENERATOR_OPTIONS = frozenset({"base_url", "timeout", "device", "dtype", "batch_size", "family", "similarity",
                               "quality", "trust_remote_code", "offload", "lavit_code"})
#: Options that only say *where or how fast* a model runs, so they do not change what it answers: not
#: part of a run's identity or an agent-call cache key (moving a server to another port or a model to
#: another GPU resumes a run instead of starting it again).
EXECUTION_OPTIONS = frozenset({"base_url", "timeout", "api_key_env", "device", "batch_size"})
#: Every option some unirag caption or image backend declares (besides the model named in the spec).
#: ``Captioner``/``ImageGenerator`` refuse any other keyword (a misspelt option would otherwise be
#: dropped without a word); an option another backend takes is accepted and dropped, as the CLI's
#: shared option set is. A test keeps this list equal to the backends' signatures.
KNOWN_GENERATOR_OPTIONS = frozenset({
    "api_key_env", "base_url", "batch_size", "check_safety", "detail", "device", "dtype", "family",
    "lavit_code", "lavit_module", "model", "model_path", "noise", "offload", "oom_fallback", "pipeline", "prompt_format",
    "quality", "reseed", "reseed_every", "seed", "similarity", "strategy", "text_encoder", "timeout", "top_k",
    "trust_remote_code", "use_xformers", "variant",
})


def parse_spec(spec: str, kind: str = CAPTION) -> tuple[str, str]:
    """``'openai:gpt-4o'`` -> ``('openai', 'gpt-4o')``.

    The prefix is case-insensitive; an unknown prefix or an empty name raises ConfigError naming
    ``kind`` (:data:`CAPTION` or :data:`IMAGE`) and listing the valid forms.
    """
    backends = BACKENDS[kind]
    prefix, sep, name = str(spec).partition(":")
    prefix = prefix.strip().lower()
    if not sep or prefix not in backends:
        valid = "; ".join(f"{p}:<{what}>" for p, (_, what) in backends.items())
        raise ConfigError(f"unknown {kind} spec {spec!r}; valid forms: {valid}")
    name = name.strip()
    if not name:
        raise ConfigError(f"{kind} spec {spec!r} lacks a name after '{prefix}:' ({backends[prefix][1]})")
    return prefix, name


def load_generator(spec: str, kind: str = CAPTION, **opts: Any) -> Any:
    """Import the backend a spec names (only now: SDKs and torch are heavy) and construct it with the
    options it declares (:func:`declared_options`). ``family`` overrides the caption prompt template
    family, e.g. ``llava`` for a LLaVA model served through an OpenAI-compatible server."""
    prefix, name = parse_spec(spec, kind)
    family = opts.get("family")
    if kind == CAPTION and family is not None and family not in FAMILIES:
        raise ConfigError(f"unknown prompt family {family!r}; expected one of {', '.join(FAMILIES)}")
    module_name, attr = BACKENDS[kind][prefix][0].split(":")
    cls = getattr(importlib.import_module(module_name), attr)
    kwargs = declared_options(cls.__init__, opts)
    return cls(name, spec=f"{prefix}:{name}", **kwargs)


def profile_options(spec: str, settings: Any = None, options: dict[str, Any] | None = None,
                    kind: str = CAPTION) -> dict[str, Any]:
    """``options`` with what the behaviour settings imply for ``spec``'s backend filled in where the user
    left the choice open (``settings``: a profile name or :class:`unirag.profiles.Settings`):

    - ``hf:`` (``hf_vlm_runtime``, ``llava_prompt_format``): official is ``infer_llava``'s
      ``from_pretrained`` without a dtype (float32 where ``dtype`` is auto or absent) and batch size 1;
    - images, ``image_seeding = official``: Emu2-Gen ``reseed=False`` (never seeded), LaVIT
      ``reseed_every=1000``; ``image_top1 = top-candidate``: ``retrieval:top1`` draws noise for a query
      without a top image (``noise=True``).
    """
    settings = resolve(settings)
    prefix = str(spec).strip().partition(":")[0]
    out = dict(options or {})
    if kind == CAPTION and prefix == "hf":
        if settings["hf_vlm_runtime"] == "official":
            if out.get("dtype") in (None, "auto"):
                out["dtype"] = "float32"
            out.setdefault("batch_size", 1)
        out.setdefault("prompt_format", settings["llava_prompt_format"])
    elif kind == IMAGE and prefix == "retrieval" and settings["image_top1"] == "top-candidate":
        out.setdefault("noise", True)
    elif kind == IMAGE and settings["image_seeding"] == "official":
        # LaVIT: 1000 queries per official process, the seed set again before the first of each such batch
        implied = {"emu2-gen": ("reseed", False), "lavit": ("reseed_every", 1000)}.get(prefix)
        if implied:
            out.setdefault(*implied)
    return out


def declared_options(fn: Any, opts: dict[str, Any]) -> dict[str, Any]:
    """The options ``fn`` declares (all of them when it takes ``**kwargs``), None values dropped."""
    params = inspect.signature(fn).parameters
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    return {k: v for k, v in opts.items() if v is not None and (takes_all or k in params)}


def load_factory(target: str, kind: str) -> Any:
    """``"package.module:factory"`` -> the callable it names (imported now); ConfigError naming what failed."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"python {kind} spec needs python:MODULE:FACTORY (e.g. python:mypkg.gen:make), got "
                          f"{target!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"cannot import module {module_name!r} for python:{target} ({e})") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ConfigError(f"module {module_name!r} has no callable {attr!r} (python:{target})")
    return factory


def identity_config(config: dict) -> dict:
    """A generator's recorded config without the execution options (what a resume must match)."""
    return {k: v for k, v in config.items() if k not in EXECUTION_OPTIONS}
