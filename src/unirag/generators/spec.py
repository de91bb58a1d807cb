"""Parse ``PREFIX:NAME`` backend specs and build the backend they name.

Caption generators (:mod:`unirag.generators.registry`) and image generators
(:mod:`unirag.generators.images.registry`) name their backends the same way, so the parsing, the
error messages listing the valid forms, and the "pass each backend only the options its
constructor declares" rule live here once; each registry only supplies its table of backends.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from unirag.errors import ConfigError

# prefix -> ("module:class", what NAME means)
BackendTable = dict[str, tuple[str, str]]


def parse_backend_spec(spec: str, backends: BackendTable, kind: str) -> tuple[str, str]:
    """``'openai:gpt-4o'`` -> ``('openai', 'gpt-4o')``.

    The prefix is case-insensitive; an unknown prefix or an empty name raises ConfigError naming
    ``kind`` (e.g. "image generator") and listing the valid forms.
    """
    prefix, sep, name = str(spec).partition(":")
    prefix = prefix.strip().lower()
    if not sep or prefix not in backends:
        valid = "; ".join(f"{p}:<{what}>" for p, (_, what) in backends.items())
        raise ConfigError(f"unknown {kind} spec {spec!r}; valid forms: {valid}")
    name = name.strip()
    if not name:
        raise ConfigError(f"{kind} spec {spec!r} lacks a name after '{prefix}:' ({backends[prefix][1]})")
    return prefix, name


def build_backend(prefix: str, name: str, backends: BackendTable, opts: dict[str, Any]) -> Any:
    """Import the backend class for ``prefix`` (only now: SDKs and torch are heavy) and construct it.

    Options set to None count as not given, and options the constructor does not declare are
    dropped, so one CLI option set serves every backend.
    """
    module_name, attr = backends[prefix][0].split(":")
    cls = getattr(importlib.import_module(module_name), attr)
    kwargs = declared_options(cls.__init__, opts)
    kwargs.pop("self", None)
    return cls(name, spec=f"{prefix}:{name}", **kwargs)


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


def check_generator_options(owner: str, spec: str | None, options: dict[str, Any], own: tuple[str, ...]) -> None:
    """ConfigError naming the first keyword no backend takes, with the known ones (``own``: the
    caller's own keywords, listed too). ``python:`` plugins take any options: not checked."""
    if spec is not None and spec.strip().startswith("python:"):
        return
    unknown = sorted(k for k in options if k not in KNOWN_GENERATOR_OPTIONS)
    if unknown:
        known = ", ".join(sorted(set(own) | KNOWN_GENERATOR_OPTIONS))
        raise ConfigError(f"{owner}: unknown option {unknown[0]!r}" + (f" (and {', '.join(map(repr, unknown[1:]))})"
                                                                       if len(unknown) > 1 else "")
                          + f"; known options: {known}")


def retry_policy(max_attempts: Any = None, retry: Any = None):
    """The :class:`~unirag.runs.retry.RetryPolicy` for ``max_attempts=`` / ``retry=`` (a RetryPolicy, or
    None: the runs' default policy), checked: InputError naming the argument for a wrong type."""
    from unirag.errors import InputError
    from unirag.runs.retry import RetryPolicy

    if retry is not None and not isinstance(retry, RetryPolicy):
        raise InputError(f"expected a unirag.runs.retry.RetryPolicy, got {type(retry).__name__}", field="retry")
    policy = retry or RetryPolicy()
    if max_attempts is not None:
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise InputError(f"expected a positive integer, got {max_attempts!r}", field="max_attempts")
        from dataclasses import replace

        policy = replace(policy, max_attempts=max_attempts)
    return policy
