"""The one example-driven generation run, shared by caption runs and image runs.

Both have one shape: queries in, a generator, a mode (zero-shot / random / rag) with ``k`` examples
from a retrieval run file, an index or a live retriever, and a resumable run directory out. This
module holds that shape once: the options (:class:`ExampleRunConfig`), the queries and what the run
records about them, the generator on Ray workers (:func:`open_remote`), the one run kind
(:class:`ExampleJob`) and the run itself (:func:`run_job`). What is specific to the output kind (how
one query's prompt, call and record are made) is the kind's hook: :mod:`unirag.pipelines.caption`,
:mod:`unirag.pipelines.image_gen`.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from unirag.data.mbeir import query_to_json, read_queries
from unirag.data.records import Query
from unirag.pipelines.examples import ExampleSelector
from unirag.pipelines.remote_models import ModelRecipe, RemoteModel
from unirag.retrieval.results import Pair
from unirag.runs.engine import engine_options, open_pool, runs_on_ray
from unirag.runs.executor import execute as execute_kind
from unirag.runs.retry import RetryPolicy
from unirag.runs.rundir import RunDir


@dataclass
class ExampleRunConfig:
    """One run. ``queries``: an M-BEIR queries file or :class:`~unirag.data.records.Query` records;
    ``index``: an index directory, a :class:`unirag.Index` or a live :class:`unirag.Retriever` (rag
    mode, examples retrieved on the fly), or ``retrieval``: a retrieval run file; ``pool``: the pool
    file (random examples, pair completion); ``pool_images_root``: where example image paths start;
    ``k``: examples per query (None: the run's default); ``seed``: which random examples;
    ``generator_options`` go to the backend; ``limit``: only the first queries; ``save_prompts``: how
    many rendered prompts to keep; ``profile``: a profile name or :class:`unirag.profiles.Settings`
    (recorded in the manifest); ``selection``: how retrieved pairs become examples
    (:class:`unirag.Selection` or its dict; rag mode with ``index``); ``engine``: where a local model
    runs, "local" (this process) or "ray" (Ray actors, one model load each), or an
    :class:`~unirag.runs.engine.EngineOptions` (workers, GPUs per worker, cluster address) or a
    :class:`~unirag.runs.engine.WorkerPool` shared by several runs (see :mod:`unirag.runs.engine`)."""

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
    seed: int = 0


def load_queries(cfg: ExampleRunConfig) -> tuple[list[Query], Path | None, list[Query]]:
    """The run's queries from a file (and its path) or as given (path None), and the first ``cfg.limit``
    of them (the ones this run does)."""
    queries, path = cfg.queries, None
    if isinstance(queries, str | Path):
        queries, path = read_queries(queries), Path(queries)
    return list(queries), path, list(queries)[: cfg.limit]


def queries_identity(queries: list[Query], path: Path | None) -> str:
    """What a run records about its queries: the file, or a digest of in-memory queries' ids and content."""
    if path is not None:
        return str(path.resolve())
    blob = json.dumps([query_to_json(q) for q in queries], sort_keys=True, ensure_ascii=False).encode()
    return f"{len(queries)} queries in memory, sha256 {hashlib.sha256(blob).hexdigest()[:16]}"


def open_remote(stack: Any, kind: str, spec: str, options: dict[str, Any], engine: Any, ask: bool = False
                ) -> tuple[Any, Any, Any]:
    """(the driver's stand-in, the worker pool, the recipe) of a local model that runs on Ray workers
    (``engine`` "ray", see :mod:`unirag.runs.engine`), else three None; ``ask``: the stand-in asks a
    worker to render the prompts the run saves in the model's wire form."""
    if not runs_on_ray(engine, spec):
        return None, None, None
    pool = stack.enter_context(open_pool(engine))
    recipe = ModelRecipe(spec, options, kind)  # the model loads on the workers only
    return RemoteModel(pool.describe(recipe), functools.partial(pool.ask, recipe) if ask else None), pool, recipe


@dataclass
class PreparedQuery:
    """A query with what the driver chose for it: its examples and the leakage guard's count for them
    (``{"flagged", "excluded"}``; None: guard off). Picklable: this is what a Ray worker receives."""

    query: Query
    examples: list[Pair]
    leaks: dict[str, int] | None = None


@dataclass
class ExampleJob:
    """The run kind (:class:`~unirag.runs.executor.RunKind`) of caption and image runs.

    A query is prepared here (its examples chosen by ``selector``, or by the kind's ``pick``) and a
    list of prepared queries becomes records by the kind's hook ``work_batch(prepared, images)``
    (``images``: their image files decoded ahead, path -> image); ``image_paths(prepared)`` names
    those files. Choosing and generating are separate steps so that on Ray the driver chooses and the
    workers generate: a worker's job has no selector.
    """

    work_batch: Callable[[list[PreparedQuery], dict[str, Any]], list[dict[str, Any]]]
    image_paths: Callable[[Sequence[PreparedQuery]], list[str]]
    selector: ExampleSelector | None = None
    #: the model takes ``batch_size`` queries per call (on Ray, the driver's stand-in does not batch
    #: itself but sends its workers' batch size: the items go out that many at a time)
    batches: bool = False
    batch_size: int = 1
    #: images a query loads besides its examples (a caption query's own image)
    own_images: int = 0
    pick: Callable[[Query], PreparedQuery] | None = None

    @staticmethod
    def key(q: Query) -> str:
        return q.qid

    def prepare(self, q: Query) -> PreparedQuery:
        if self.pick is not None:
            return self.pick(q)
        return PreparedQuery(q, self.selector.select(q), self.selector.leak_info(q))

    def n_images(self, queries: Sequence[Query]) -> int:
        return len(queries) * (self.own_images + self.selector.k)


def run_job(job: ExampleJob, cfg: ExampleRunConfig, queries: list[Query], task: str, identity: dict[str, Any],
            settings: dict[str, Any], *, before: Callable[[Any], None], pool: Any = None,
            **execute: Any) -> tuple[dict[str, int], dict[str, int], dict[str, Any]]:
    """Run (or resume) ``job`` over ``queries`` into the run directory ``cfg.out``: the examples of the
    queries not yet done are chosen (one batched retrieval), ``before(run)`` (the prompts saved up
    front), then :func:`unirag.runs.executor.execute` with ``execute``'s options, on ``pool``'s
    workers when given. ``settings`` (the manifest's, not the identity) gain where the run ran.
    Returns this run's counts, the directory's final counts and its totals."""
    settings["engine"] = asdict(engine_options(cfg.engine))
    if pool is None:
        settings["engine"]["engine"] = "local"
    with RunDir(cfg.out, task, identity, settings) as run:
        done = run.store.done_keys()
        job.selector.prepare([q for q in queries if q.qid not in done])
        before(run)
        counts = execute_kind(job, queries, run.store, policy=RetryPolicy(max_attempts=cfg.max_attempts),
                              engine=cfg.engine, pool=pool, progress=cfg.progress, **execute)
        final = run.finish([q.qid for q in queries])
        return counts, final, run.manifest["totals"]
