"""The public names: importable from ``unirag``, documented, lazy; and no import circles anywhere."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import json
import subprocess
import sys
import types
from pathlib import Path

import pytest
from import_graph import cycles, import_graph

import unirag

_spec = importlib.util.spec_from_file_location(
    "docs_hooks", Path(__file__).resolve().parents[2] / "scripts" / "docs_hooks.py")
docs_hooks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(docs_hooks)

HEAVY = ["torch", "transformers", "faiss", "numpy", "PIL", "diffusers", "openai", "sentence_transformers"]


def test_import_unirag_loads_no_heavy_library():
    code = ("import sys, json, unirag\n"
            "names = list(unirag.__all__)\n"
            f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_every_public_name_resolves_and_is_documented():
    """The docs build runs the same check (scripts/docs_hooks.py), so the two cannot disagree."""
    for name in unirag.__all__:
        getattr(unirag, name)
        assert name in dir(unirag)
    assert docs_hooks.undocumented(unirag) == []
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        unirag.Nope  # noqa: B018


def test_undocumented_finds_missing_class_function_and_method_docstrings():
    @dataclasses.dataclass
    class Bare:  # @dataclass writes "Bare(x: int)" as its __doc__: not a docstring
        x: int

        def method(self):
            return self.x

    class Inherits(ValueError):  # inspect.getdoc would return ValueError's docstring
        pass

    class Documented:
        """Has one."""

        def method(self):
            """And so does its method."""

        @property
        def prop(self):
            return 1

    def function():
        return 1

    fake = types.ModuleType("fake")
    fake.__all__ = ["__version__", "Bare", "Inherits", "Documented", "function"]
    fake.__version__ = "0"
    fake.Bare, fake.Inherits, fake.Documented, fake.function = Bare, Inherits, Documented, function
    assert docs_hooks.undocumented(fake) == ["Bare", "Bare.method", "Inherits", "Documented.prop", "function"]


def test_public_names_cover_the_documented_contract():
    for name in ("load_encoder", "Pool", "Index", "Retriever", "Captioner", "ImageGenerator", "XR",
                 "caption_metrics", "retrieval_metrics", "cir_metrics"):
        assert name in unirag.__all__
    assert list(inspect.signature(unirag.load_encoder).parameters)[:3] == ["spec", "device", "dtype"]
    assert inspect.signature(unirag.load_encoder).parameters["device"].default == "auto"
    assert inspect.signature(unirag.Retriever).parameters["device"].default == "auto"


def test_dir_shows_only_the_public_names():
    shown = set(dir(unirag))
    assert shown == set(unirag.__all__)
    assert not shown & {"Any", "TYPE_CHECKING", "annotations", "importlib"}


def test_no_import_circles():
    graph = import_graph()
    assert "unirag.cir.pipeline" in graph["unirag.cir.api"]  # the graph sees real imports
    assert cycles(graph) == []


def test_every_module_imports_in_a_fresh_interpreter():
    modules = sorted(m for m in import_graph() if m.startswith("unirag") and not m.endswith("__main__"))
    code = ("import importlib, sys\n"
            f"for m in {modules!r}:\n"
            "    importlib.import_module(m)\n"
            "print('ok', len(sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("ok")
