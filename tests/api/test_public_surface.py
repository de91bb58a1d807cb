"""The public names: importable from ``unirag``, documented, lazy; and no import circles anywhere."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import pytest
from import_graph import cycles, import_graph

import unirag

HEAVY = ["torch", "transformers", "faiss", "numpy", "PIL", "diffusers", "openai", "sentence_transformers"]


def test_import_unirag_loads_no_heavy_library():
    code = ("import sys, json, unirag\n"
            "names = list(unirag.__all__)\n"
            f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_every_public_name_resolves_and_is_documented():
    missing_docs = []
    for name in unirag.__all__:
        value = getattr(unirag, name)
        if name == "__version__":
            continue
        assert name in dir(unirag)
        if not inspect.getdoc(value):
            missing_docs.append(name)
        if inspect.isclass(value):
            for attr, member in vars(value).items():
                if isinstance(member, classmethod | staticmethod):
                    member = member.__func__
                if attr.startswith("_") or not callable(member) and not isinstance(member, property):
                    continue
                if not inspect.getdoc(member):
                    missing_docs.append(f"{name}.{attr}")
    assert missing_docs == []
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        unirag.Nope  # noqa: B018


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
