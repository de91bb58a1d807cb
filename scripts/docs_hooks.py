"""MkDocs hook (mkdocs.yml ``hooks:``): the docs build fails when the public API is not fully documented.

Two checks, run before any page is rendered:

* every name in ``unirag.__all__``, and every public method and property of a public class, has a
  docstring (what the API reference shows; an empty entry would be a silent hole);
* ``docs/reference.md`` has one ``::: unirag.NAME`` entry per public name, no more, no less, so a
  name added to ``unirag.__all__`` cannot be left out of the reference.

``tests/api/test_public_surface.py`` uses :func:`undocumented` too, so the suite and the build agree.

The docstrings are written for the source (Sphinx roles such as ``:class:`Pool```); the rendered
pages show the name alone, in code (:func:`on_page_content`).
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path
from types import ModuleType
from typing import Any

REFERENCE_PAGE = "reference.md"
_ENTRY = re.compile(r"^::: unirag\.(\w+)\s*$", re.M)
# ":meth:<code>~unirag.Pool.search</code>" as rendered from a Sphinx role -> "<code>search</code>"
_ROLE = re.compile(r":(?:class|meth|func|mod|attr|data|exc|obj):<code>(~?)([^<]*)</code>")


def public_names(module: ModuleType) -> list[str]:
    """The names the reference documents: ``__all__`` less the version string."""
    return [n for n in module.__all__ if n != "__version__"]


def undocumented(module: ModuleType) -> list[str]:
    """Public names (``NAME`` or ``Class.member``) of ``module`` whose docstring is missing or empty."""
    missing = []
    for name in public_names(module):
        value = getattr(module, name)
        if not (_own_class_doc(value) if inspect.isclass(value) else inspect.getdoc(value)):
            missing.append(name)
        if inspect.isclass(value):
            for attr, member in vars(value).items():
                if isinstance(member, classmethod | staticmethod):
                    member = member.__func__
                if attr.startswith("_") or not callable(member) and not isinstance(member, property):
                    continue
                if not inspect.getdoc(member):
                    missing.append(f"{name}.{attr}")
    return missing


def _own_class_doc(cls: type) -> str | None:
    """The class's own docstring: not one inherited from a base class (``inspect.getdoc`` falls back
    to those), nor the ``Name(field: type, ...)`` line ``@dataclass`` writes when there is none."""
    doc = vars(cls).get("__doc__")
    if doc and dataclasses.is_dataclass(cls):
        try:
            generated = cls.__name__ + str(inspect.signature(cls)).replace(" -> None", "")
        except (TypeError, ValueError):
            generated = cls.__name__
        if doc == generated:
            return None
    return inspect.cleandoc(doc) if doc else None


def reference_entries(markdown: str) -> list[str]:
    """The ``NAME`` of every ``::: unirag.NAME`` line of the reference page, in page order."""
    return _ENTRY.findall(markdown)


def reference_problems(module: ModuleType, markdown: str) -> list[str]:
    """What is wrong with the reference page's entries (empty when it lists each public name once)."""
    entries = reference_entries(markdown)
    names = public_names(module)
    problems = [f"{n} is public but not in {REFERENCE_PAGE}" for n in names if n not in entries]
    problems += [f"{n} is in {REFERENCE_PAGE} but not in unirag.__all__" for n in entries if n not in names]
    problems += [f"{n} is listed twice in {REFERENCE_PAGE}" for n in sorted(set(entries)) if entries.count(n) > 1]
    return problems


def on_config(config: Any, **_: Any) -> Any:
    from mkdocs.exceptions import PluginError

    import unirag

    problems = [f"{n} has no docstring" for n in undocumented(unirag)]
    problems += reference_problems(unirag, (Path(config["docs_dir"]) / REFERENCE_PAGE).read_text(encoding="utf-8"))
    if problems:
        raise PluginError("the API reference is incomplete:\n  " + "\n  ".join(problems))
    return config


def on_page_content(html: str, **_: Any) -> str:
    """Sphinx roles in docstrings rendered as plain code (``~`` keeps the last dotted part, as Sphinx)."""
    return _ROLE.sub(lambda m: f"<code>{m.group(2).rsplit('.', 1)[-1] if m.group(1) else m.group(2)}</code>", html)
