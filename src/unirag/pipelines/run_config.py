"""The options every example-driven generation run shares (caption runs and image runs).

Caption and image runs have one shape: queries in, a generator, a mode (zero-shot / random / rag)
with ``k`` examples from a retrieval run file, an index or a live retriever, and a resumable run
directory out. Only what is specific to the output kind lives in the subclasses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unirag.data.records import Query


@dataclass
class ExampleRunConfig:
    """One run. ``queries``: an M-BEIR queries file or :class:`~unirag.data.records.Query` records;
    ``index``: an index directory, a :class:`unirag.Index` or a live :class:`unirag.Retriever` (rag
    mode, examples retrieved on the fly), or ``retrieval``: a retrieval run file; ``pool``: the pool
    file (random examples, pair completion); ``pool_images_root``: where example image paths start;
    ``k``: examples per query (None: the run's default); ``generator_options`` go to the backend;
    ``limit``: only the first queries; ``save_prompts``: how many rendered prompts to keep;
    ``profile``: a profile name or :class:`unirag.profiles.Settings` (recorded in the manifest);
    ``selection``: how retrieved pairs become examples (:class:`unirag.Selection` or its dict; rag
    mode with ``index``); ``engine``: where a local model runs, "local" (this process) or "ray" (Ray
    actors, one model load each), or an :class:`~unirag.runs.engine.EngineOptions` (workers, GPUs per
    worker, cluster address) or a :class:`~unirag.runs.engine.WorkerPool` shared by several runs (see
    :mod:`unirag.runs.engine`)."""

    queries: str | Path | Sequence[Query]
    generator: str
    out: str | Path
    mode: str = "zero-shot"
    k: int | None = None
    images_root: str | Path | None = None
    pool_images_root: str | Path | None = None
    retrieval: str | Path | None = None
    index: Any = None
    pool: str | Path | None = None
    concurrency: int = 1
    limit: int | None = None
    save_prompts: int = 5
    prices: str | Path | None = None
    max_attempts: int = 6
    generator_options: dict[str, Any] = field(default_factory=dict)
    progress: bool = True
    profile: Any = None
    selection: Any = None
    engine: Any = "local"
