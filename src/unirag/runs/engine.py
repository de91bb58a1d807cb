"""Where a generation run's model calls happen: in this process (``local``) or on Ray actors (``ray``).

One engine serves caption runs, image runs, X^R agent calls and experiment grids. With ``ray`` a
:class:`WorkerPool` keeps one group of ``workers`` actors per model (reused by every task using that
model; the least recently used group is stopped when the cluster has no room for a new one). Each
actor loads its model once, on the GPU(s) Ray reserved for it (``gpus_per_worker`` becomes its
``num_gpus`` and Ray sets its ``CUDA_VISIBLE_DEVICES``), and works the batches the driver's
:func:`~unirag.runs.executor.run_items` hands it (:meth:`WorkerPool.transport`): the driver claims and
stores the items as a local run does, so the guarantees are a local run's (a killed driver or a dead
actor loses only the batches in flight; two drivers on one directory never make the same call twice).
Files a run kind writes itself (generated images, saved prompts) are written by the actor, so a
cluster needs the run directory on a filesystem every node mounts at the same path. An actor is
threaded: the driver's second call has its images decoded while the model works on the first
(:class:`_Worker`). See ``docs/generation-scale.md``.

API backends and the retrieval baselines are network-bound and do not run on Ray: with
``engine="ray"`` they run locally with bounded concurrency, and the run says so (:func:`runs_on_ray`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from unirag.errors import ConfigError, UniragError
from unirag.ray_support import default_workers, ray_session
from unirag.runtime import decode_processes, decode_setting

log = logging.getLogger(__name__)

ENGINES = ("local", "ray")
#: Backend prefixes that load a model into the process (and so can be spread over Ray actors).
LOCAL_MODEL_PREFIXES = frozenset({"hf", "python", "diffusers", "lavit", "emu2-gen"})


@dataclass(frozen=True)
class EngineOptions:
    """How a run executes. ``engine``: "local" (this process) or "ray"; the rest is for Ray:
    ``workers`` actors per model (default: GPUs / ``gpus_per_worker``, else the CPUs), each with
    ``gpus_per_worker`` GPUs and ``cpus_per_worker`` CPUs; ``ray_address`` joins a cluster (default:
    start a local Ray, ``object_store_memory`` bytes); ``threads_per_worker`` torch threads in each
    actor (default: this machine's CPUs divided among the workers when Ray is local);
    ``decode_workers``: the one setting for processes that decode the images of the next calls while a
    local model works on the current one, in this process (``local``) or in each actor (``ray``)
    ("auto"/None: :func:`unirag.runtime.decode_processes`; 0: inline)."""

    engine: str = "local"
    workers: int | None = None
    gpus_per_worker: float = 0
    cpus_per_worker: float = 1
    ray_address: str | None = None
    threads_per_worker: int | None = None
    object_store_memory: int | None = None
    decode_workers: int | str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "decode_workers", decode_setting(self.decode_workers))
        if self.engine not in ENGINES:
            raise ConfigError(f"unknown engine {self.engine!r}; expected one of {', '.join(ENGINES)}")
        if self.workers is not None and self.workers < 1:
            raise ConfigError(f"--workers must be >= 1, got {self.workers}")
        if self.gpus_per_worker < 0 or self.cpus_per_worker <= 0:
            raise ConfigError("--gpus-per-worker must be >= 0 and cpus per worker > 0")
        if self.engine == "local" and (self.workers or self.gpus_per_worker or self.ray_address):
            raise ConfigError("--workers/--gpus-per-worker/--ray-address go with --engine ray")

    @property
    def ray(self) -> bool:
        return self.engine == "ray"

    def actor_sizing(self, ray_module: Any, n: int) -> tuple[str, int | None, int]:
        """(device, torch threads, decode processes) of each of ``n`` actors: the one sizing rule of the
        generation actors and the index build's (:mod:`unirag.index.ray_engine`)."""
        threads = self.threads_per_worker
        if threads is None and not self.ray_address:
            threads = max(1, (os.cpu_count() or 1) // n)
        cpus = int(ray_module.cluster_resources().get("CPU", 1))  # decode processes are not Ray tasks
        decode = decode_processes(self.decode_workers, share=(cpus, n), model_on_cpu=not self.gpus_per_worker)
        return ("cuda" if self.gpus_per_worker else "cpu"), threads, decode


def engine_options(engine: str | EngineOptions | WorkerPool | None) -> EngineOptions:
    """``"local"``/``"ray"``/None/options/a pool -> the options."""
    if isinstance(engine, WorkerPool):
        return engine.options
    if isinstance(engine, EngineOptions):
        return engine
    return EngineOptions(engine=engine or "local")


def with_decode_default(engine: str | EngineOptions | WorkerPool | None, default: int | str | None) -> Any:
    """``engine`` with ``default`` decode workers where its options leave them to auto (a run's own
    setting: a grid cell's option, the agents YAML's); a pool the caller opened is used as it is."""
    if isinstance(engine, WorkerPool) or default is None:
        return engine
    options = engine_options(engine)
    return options if options.decode_workers is not None else replace(options, decode_workers=default)


def runs_on_ray(engine: str | EngineOptions | WorkerPool | None, spec: str) -> bool:
    """True when ``spec``'s calls go to Ray workers: the engine is ray and the spec loads a local model.

    With an API or retrieval spec and ``engine="ray"`` a warning says the run stays local (its calls
    are network-bound and keep their bounded concurrency).
    """
    if not engine_options(engine).ray:
        return False
    prefix = str(spec).partition(":")[0].strip().lower()
    if prefix in LOCAL_MODEL_PREFIXES:
        return True
    log.warning("%s is not a local model: its calls run in this process with bounded concurrency "
                "(--concurrency), not on Ray workers", spec)
    return False


# -- what a worker runs --------------------------------------------------------------------------------
#: A recipe (:class:`unirag.pipelines.remote_models.ModelRecipe`, or anything picklable with its ``key``,
#: ``load(device)`` and ``describe(model)``) says how a worker loads one model; workers are shared by
#: the recipes with the same ``key``.
#: Calls a worker takes at once: the driver's two in flight (one works the model while the next has
#: its images decoded) and one for ``describe``/``shutdown``, which must not queue behind them.
WORKER_CONCURRENCY = 3
#: What a call that a stopping worker (or the driver) cancelled before it reached the model raises.
CANCELLED = "this call was cancelled (the Ray worker is stopping or the driver gave up)"
#: What the driver raises when no worker of a model is left.
ALL_DIED = "every Ray worker died (see Ray's logs, e.g. /tmp/ray/session_latest/logs); rerun to resume"


class _Worker:
    """A Ray actor (threaded, :data:`WORKER_CONCURRENCY` calls at once): loads its model once, then
    works the calls the driver hands it, one at a time on the model.

    A call names the run (``task``) and how to open the run's :class:`~unirag.runs.executor.RunKind`
    on the model (``open_kind(model)``, once per run). A call that enters while the model works on the
    one before has its payloads' image files decoded (:meth:`_decoded`), then waits for
    ``_model_lock``: its model part (``work_batch(payloads, images)``) is given those images, so the
    model thread does not read the files again. The driver claims and stores the items
    (:func:`~unirag.runs.executor.run_items`); a call returns one record's fields per payload.
    """

    def __init__(self, recipe: Any, device: str, threads: int | None, decode: int = 0) -> None:
        self._model_lock = threading.Lock()  # the model: one call at a time
        self._tasks_lock = threading.Lock()  # ``tasks``; taken before ``_model_lock``, never while holding it
        self._stopping = False
        self.decode = decode
        if threads:
            os.environ["UNIRAG_TORCH_THREADS"] = str(threads)  # read by unirag.runtime.configure_torch_threads
            with contextlib.suppress(ImportError):
                import torch

                torch.set_num_threads(threads)
        self.model = recipe.load(device)
        self.tasks: dict[str, Any] = {}  # task -> the run kind opened on the model (a thin wrapper of it)

    def _task(self, task: str, open_kind: Callable[[Any], Any]) -> Any:
        with self._tasks_lock:
            if self._stopping:
                raise UniragError(CANCELLED)
            if task not in self.tasks:
                with self._model_lock:  # opening may touch the model another call is using
                    self.tasks[task] = open_kind(self.model)
            return self.tasks[task]

    def _decoded(self, kind: Any, payloads: list[Any]) -> dict[str, Any]:
        """This call's images (path -> image; an unreadable file is left out and fails where it is loaded),
        decoded by the ``decode`` processes in the call's own thread while the model works on the call
        before. Empty without decode processes, or when decoding fails: the model's thread decodes them."""
        if not self.decode:
            return {}
        from unirag.data.loader import ImageLoader

        try:
            paths = list(dict.fromkeys(str(p) for p in kind.image_paths(payloads)))
            jobs = ((None, paths[s : s + 8]) for s in range(0, len(paths), 8))
            return {d.path: d.image for _, items in ImageLoader(self.decode).map(jobs) for d in items if d.ok}
        except UniragError as e:  # its decode processes kept dying (out of memory): inline from now on
            log.warning("this worker's decode processes died (%s); it decodes its images itself from now on",
                        e)
            self.decode = 0
        except Exception as e:  # noqa: BLE001 - decoded inline instead, same results
            log.warning("decoding a call's images ahead failed (%s); the model's thread decodes them", e)
        return {}

    def run(self, task: str, open_kind: Callable[[Any], Any], payloads: list[Any]) -> list[dict[str, Any]]:
        """One record's fields per payload (a prepared item). A failed item raises
        :class:`~unirag.errors.BackendError` (out of GPU memory: after the cached memory is released);
        the driver then sends the items one by one."""
        from unirag.runs.executor import as_backend_error

        kind = self._task(task, open_kind)
        images = self._decoded(kind, payloads)  # while the model works on the call before
        with self._model_lock:
            if self._stopping or _cancelled():
                raise UniragError(CANCELLED)
            try:
                if kind.batches:
                    return kind.work_batch(payloads, images)
                return [kind.work_batch([p], images)[0] for p in payloads]
            except Exception as err:  # noqa: BLE001 - as_backend_error re-raises what is not a model failure
                raise as_backend_error(err, release=True) from None

    def ask(self, question: Callable[[Any], Any]) -> Any:
        """``question(model)`` on the loaded model, between calls (e.g. a prompt in the model's wire form)."""
        with self._model_lock:
            return question(self.model)

    def shutdown(self) -> None:
        self._stopping = True  # a call still waiting for the model gives up
        with self._tasks_lock, self._model_lock:
            self.tasks.clear()
            close = getattr(self.model, "close", None)
            if callable(close):
                close()


def _cancelled() -> bool:
    """Whether the driver cancelled the running Ray call (``ray.cancel`` only flags a call that a threaded
    actor has started: one waiting for the model checks it before it claims anything)."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():  # not in a Ray worker (get_runtime_context would start Ray)
        return False
    try:
        return bool(ray.get_runtime_context().is_canceled())
    except Exception:  # noqa: BLE001 - not in a Ray worker (a test calling the actor class directly)
        return False


def _unwrap(err: BaseException) -> BaseException:
    """A unirag error raised in a worker, as itself (Ray wraps it with the remote traceback)."""
    cause = getattr(err, "cause", None)
    return cause if isinstance(cause, UniragError) else err


@dataclass
class _Group:
    actors: list[Any]
    model: dict[str, Any]  # what the model reports about itself (worker 0's description)
    last_used: float
    dead: set[int] = field(default_factory=set)  # workers that died: later runs skip them


class WorkerPool(contextlib.AbstractContextManager):
    """Ray actors for a run (or a grid of runs): one group of ``workers`` actors per model.

    Use as ``with WorkerPool(EngineOptions(engine="ray", workers=2)) as pool:``; Ray is started or
    joined on entry and (when started here) stopped on exit, and every actor is stopped.
    """

    def __init__(self, options: EngineOptions | None = None) -> None:
        self.options = options or EngineOptions(engine="ray")
        self._groups: dict[str, _Group] = {}
        self._session = contextlib.ExitStack()
        self.ray = None

    # -- lifecycle ------------------------------------------------------------------------------------
    def _connect(self) -> Any:
        """Start or join Ray on first use (a grid without local-model cells never starts it)."""
        if self.ray is None:
            o = self.options
            self.ray = self._session.enter_context(ray_session(o.ray_address, object_store_memory=o.object_store_memory))
        return self.ray

    def __exit__(self, *exc: object) -> None:
        try:
            for key in list(self._groups):
                self._stop(key)
        finally:
            self._session.close()
            self.ray = None

    def _stop(self, key: str) -> None:
        group = self._groups.pop(key)
        ray = self.ray
        with contextlib.suppress(Exception):  # a dead actor has nothing left to release
            ray.get([a.shutdown.remote() for a in group.actors], timeout=60)
        for a in group.actors:
            ray.kill(a)

    # -- actors ---------------------------------------------------------------------------------------
    def _fits(self, n: int) -> bool:
        free = self.ray.available_resources()
        o = self.options
        return free.get("CPU", 0) >= n * o.cpus_per_worker and free.get("GPU", 0) >= n * o.gpus_per_worker

    def group(self, recipe: Any) -> _Group:
        """The actors holding ``recipe``'s model (started, and the model loaded, on first use)."""
        group = self._groups.get(recipe.key)
        if group is not None:
            group.last_used = time.monotonic()
            return group
        ray, o = self._connect(), self.options
        n = o.workers or default_workers(ray, o)
        while self._groups and not self._fits(n):  # make room: stop the least recently used model's actors
            self._stop(min(self._groups, key=lambda k: self._groups[k].last_used))
        device, threads, decode = o.actor_sizing(ray, n)
        cls = ray.remote(_Worker).options(num_cpus=o.cpus_per_worker, num_gpus=o.gpus_per_worker or 0,
                                          max_restarts=0, max_task_retries=0, max_concurrency=WORKER_CONCURRENCY)
        actors = [cls.remote(recipe, device, threads, decode) for _ in range(n)]
        try:
            infos = ray.get([a.ask.remote(recipe.describe) for a in actors])  # every model loaded
        except Exception as e:  # the model failed to load (bad spec, no weights, no GPU)
            for a in actors:
                ray.kill(a)
            raise _unwrap(e) from None
        group = self._groups[recipe.key] = _Group(actors, infos[0], time.monotonic())
        return group

    def describe(self, recipe: Any) -> dict[str, Any]:
        """What the model reports about itself (its config, template family, ...), from worker 0."""
        return self.group(recipe).model

    def ask(self, recipe: Any, question: Callable[[Any], Any]) -> Any:
        """``question(model)`` (picklable) answered by a live worker holding ``recipe``'s model: what only
        the loaded model knows (the exact text or body it would send for a prompt)."""
        group = self.group(recipe)
        for w, actor in enumerate(group.actors):
            if w in group.dead:
                continue
            try:
                return self.ray.get(actor.ask.remote(question))
            except self.ray.exceptions.RayActorError:  # died: the next worker answers
                group.dead.add(w)
            except self.ray.exceptions.RayTaskError as e:
                raise _unwrap(e) from None
        raise UniragError(ALL_DIED)

    # -- running --------------------------------------------------------------------------------------
    def transport(self, recipe: Any, open_kind: Callable[[Any], Any], task: str,
                  prepare: Callable[[Any], Any]) -> tuple[Callable[[list[Any]], list[dict[str, Any]]],
                                                          Callable[[], None], int]:
        """(``work``, ``stop``, live workers) for :func:`~unirag.runs.executor.run_items`, which claims and
        stores the items: ``work(items)`` prepares them (``prepare``, e.g. the query with its examples
        chosen here) and has a live worker holding ``recipe``'s model work them, each worker opening the
        run ``task``'s :class:`~unirag.runs.executor.RunKind` with ``open_kind(model)`` (picklable). Each
        worker takes two calls at once (the next one is there when the first is done). A worker that dies
        loses only the call it held: it goes to another worker. ``stop()`` cancels the calls in flight."""
        group, ray = self.group(recipe), self.ray  # connects to Ray on first use
        slots: queue.Queue[int] = queue.Queue()
        for w in [w for w in range(len(group.actors)) if w not in group.dead] * 2:
            slots.put(w)
        in_flight: set[Any] = set()
        stopping = threading.Event()

        def work(items: list[Any]) -> list[dict[str, Any]]:
            payloads = [prepare(it) for it in items]
            while not stopping.is_set():
                if len(group.dead) == len(group.actors):
                    raise UniragError(ALL_DIED)
                try:
                    w = slots.get(timeout=0.2)
                except queue.Empty:
                    continue
                if w in group.dead:
                    continue
                ref = group.actors[w].run.remote(task, open_kind, payloads)
                in_flight.add(ref)
                try:
                    while not ray.wait([ref], timeout=0.2)[0]:
                        if stopping.is_set():
                            raise UniragError(CANCELLED)
                    return ray.get(ref)
                except ray.exceptions.RayActorError:
                    if w not in group.dead:
                        group.dead.add(w)
                        log.warning("Ray worker %d died; its items go to the %d worker(s) left", w,
                                    len(group.actors) - len(group.dead))
                except ray.exceptions.RayTaskError as e:
                    raise _unwrap(e) from None
                finally:
                    in_flight.discard(ref)
                    if w not in group.dead:
                        slots.put(w)
            raise UniragError(CANCELLED)

        def stop() -> None:
            stopping.set()
            for ref in list(in_flight):
                with contextlib.suppress(Exception):  # best effort: the actors stop with the pool anyway
                    ray.cancel(ref, force=False)

        return work, stop, len(group.actors) - len(group.dead)


def open_pool(engine: str | EngineOptions | WorkerPool | None):
    """A context manager yielding the pool to use: the given one (left open), or a new one for this run."""
    if isinstance(engine, WorkerPool):
        return contextlib.nullcontext(engine)
    return WorkerPool(engine_options(engine))
