"""unirag: multimodal retrieval and retrieval-augmented generation.

The public API (the docs' Python API page, docs/python-api.md; every name in docs/reference.md)::

    import unirag
    hits = unirag.Retriever("indexes/offline").search(image="photo.jpg", k=5)
    caption = unirag.Captioner("retrieval:consensus").caption("photo.jpg", hits)

Every public name is imported on first use (module ``__getattr__``), so ``import unirag`` and
``unirag --help`` load no torch, transformers, faiss or numpy; heavy libraries load inside the
objects that need them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# module -> the public names it defines (in the order of the docs' reference)
_MODULES = {
    "unirag.encoders.registry": ("load_encoder",),
    "unirag.data.pool": ("Pool",),
    "unirag.data.records": ("Candidate", "Query", "Qrels", "Modality"),
    "unirag.index.handle": ("Index",),
    "unirag.retrieval.retriever": ("Retriever",),
    "unirag.retrieval.results": ("Hit", "Hits", "Pair"),
    "unirag.retrieval.selection": ("Selection",),
    "unirag.pipelines.captioner": ("Captioner", "Caption"),
    "unirag.pipelines.image_generator": ("ImageGenerator",),
    "unirag.cir.xr": ("XR",),
    "unirag.metrics.captions": ("caption_metrics",),
    "unirag.metrics.retrieval": ("retrieval_metrics",),
    "unirag.metrics.cir": ("cir_metrics",),
    "unirag.metrics.images": ("image_metrics",),
    "unirag.pipelines.experiment": ("run_experiment",),
    "unirag.reports.build": ("build_report",),
    "unirag.reports.compare": ("compare_runs",),
    "unirag.metrics.stats": ("bootstrap_interval", "paired_comparison"),
    "unirag.errors": ("UniragError", "ConfigError", "InputError", "BackendError"),
}
# public name -> module that defines it
_PUBLIC = {name: module for module, names in _MODULES.items() for name in names}

__all__ = ["__version__", *_PUBLIC]


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'unirag' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    """Only the public names (not this module's helper imports)."""
    return sorted(__all__)


if TYPE_CHECKING:  # for type checkers and IDEs only; never executed
    from unirag.cir.xr import XR
    from unirag.data.pool import Pool
    from unirag.data.records import Candidate, Modality, Qrels, Query
    from unirag.encoders.registry import load_encoder
    from unirag.errors import BackendError, ConfigError, InputError, UniragError
    from unirag.index.handle import Index
    from unirag.metrics.captions import caption_metrics
    from unirag.metrics.cir import cir_metrics
    from unirag.metrics.images import image_metrics
    from unirag.metrics.retrieval import retrieval_metrics
    from unirag.metrics.stats import bootstrap_interval, paired_comparison
    from unirag.pipelines.captioner import Caption, Captioner
    from unirag.pipelines.experiment import run_experiment
    from unirag.pipelines.image_generator import ImageGenerator
    from unirag.reports.build import build_report
    from unirag.reports.compare import compare_runs
    from unirag.retrieval.results import Hit, Hits, Pair
    from unirag.retrieval.retriever import Retriever
    from unirag.retrieval.selection import Selection
