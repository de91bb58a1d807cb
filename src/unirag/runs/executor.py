"""The one executor of generation runs: each item's model call, retried, each result stored at once.

Every run kind that calls a model per item (captions, images, X^R agent calls) defines once, as a
:class:`RunKind`, what it prepares for an item and how a list of prepared items (with their image
files decoded ahead, when they were) becomes record fields. :func:`execute` runs a kind:

by :func:`run_items`, the one loop: batched (a local model that batches: a failed or out-of-memory
batch is retried item by item) or one item per call (APIs with bounded concurrency, each call
retried); its calls go to a model here (for a local model, with the items' images decoded a few
calls ahead, :func:`unirag.data.loader.ahead`) or to Ray workers holding the model
(:meth:`unirag.runs.engine.WorkerPool.transport`). Whatever the path, items are claimed in the run's
:class:`~unirag.runs.store.ResultStore` before their call and stored as they finish, so Ctrl-C or a
crash loses at most the calls in flight and several processes never make the same call.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any, TypeVar

from tqdm.auto import tqdm

from unirag.errors import BackendError
from unirag.runs.retry import RetryPolicy, call_with_retry
from unirag.runs.store import STATUS_ERROR, STATUS_OK, ResultStore
from unirag.runtime import decode_processes, free_memory

T = TypeVar("T")
#: A result for an item another live process has claimed (see ResultStore.claim).
DEFERRED = object()


class RunKind:
    """What one kind of run defines once (a caption run, an image run, an X^R role's agent calls).

    ``batches``: the model takes several items per call (``batch_size`` of them); else one (on Ray
    the items still go out ``batch_size`` at a time).
    ``key(item)``: the item's key in the store. ``prepare(item)``: what the call needs besides the
    model (examples chosen, ...; made by the driver, picklable for Ray workers).
    ``image_paths(prepared)``: the image files those calls load (what is decoded ahead).
    ``n_images(items)``: about how many images the items load (the ``auto`` decode rule).
    By default an item is its own prepared call, one per call.
    ``work_batch(prepared, images)``: one record's fields per prepared item; ``images`` holds their
    image files decoded ahead (path -> image; empty: decode them), for
    :func:`unirag.data.images.load_rgb`'s ``ahead``. A failed item raises
    :class:`~unirag.errors.BackendError`.
    """

    batches = False
    batch_size = 1

    def key(self, item: Any) -> str: ...

    def prepare(self, item: Any) -> Any:
        return item

    def image_paths(self, prepared: Sequence[Any]) -> list[str]: ...

    def n_images(self, items: Sequence[Any]) -> int:
        return len(self.image_paths([self.prepare(it) for it in items]))

    def work_batch(self, prepared: list[Any], images: dict[str, Any]) -> list[dict[str, Any]]: ...


def execute(kind: RunKind, items: Sequence[Any], store: ResultStore, *, concurrency: int = 1,
            policy: RetryPolicy | None = None, decode_ahead: bool = False, engine: Any = None, pool: Any = None,
            recipe: Any = None, open_kind: Callable[[Any], RunKind] | None = None, desc: str = "items",
            progress: bool = True) -> dict[str, int]:
    """Run ``kind`` over the ``items`` not yet done in ``store``; returns counts ok/error/skipped.

    ``pool``: a :class:`~unirag.runs.engine.WorkerPool`: the calls go to its workers holding
    ``recipe``'s model, each opening the kind with ``open_kind(model)`` (picklable), two calls per
    worker at once. Else they run here: batched when ``kind.batches``, else one item per call,
    ``concurrency`` at once, retried by ``policy``. ``decode_ahead``: a local model in this process:
    the next calls' image files are decoded in decode workers meanwhile, as many as ``engine`` (its
    :class:`~unirag.runs.engine.EngineOptions`) says (see :func:`unirag.data.loader.ahead`).
    Either way the items are claimed and stored here, by :func:`run_items`.
    """
    items = list(items)
    size = kind.batch_size if kind.batches or pool is not None else 1
    work, stream, stop = (lambda its: kind.work_batch([kind.prepare(it) for it in its], {})), None, None  # noqa: E731
    if pool is not None:
        work, stop, workers = pool.transport(recipe, open_kind, str(store.path.resolve()), kind.prepare)
        concurrency, desc = 2 * workers, f"{desc} (ray, {workers} workers)"
    elif decode_ahead:
        from unirag.data.loader import ahead

        done = store.done_keys()
        todo = [it for it in items if kind.key(it) not in done]
        n = kind.n_images(todo)
        setting = getattr(getattr(engine, "options", engine), "decode_workers", None)  # "local"/None: auto
        work, stream = ahead([todo[s : s + size] for s in range(0, len(todo), size)], kind.key, kind.prepare,
                             kind.image_paths, kind.work_batch, decode_processes(setting, n) if n else 0)
    # a model's batch is not retried as a whole (its failures are not transient): item by item
    whole = kind.batches or pool is not None
    try:
        return run_items(items, kind.key, work, store, batch_size=size,
                         concurrency=1 if kind.batches and pool is None else concurrency,
                         policy=RetryPolicy(max_attempts=1) if whole else policy, desc=desc,
                         progress=progress, stop=stop)
    finally:
        if stream is not None:
            stream.close()


def as_backend_error(err: BaseException, release: bool = False) -> BackendError:
    """An item's failure as a BackendError; anything but a BackendError or a GPU out-of-memory error (torch's
    class, or a backend's ``oom`` error) is a bug and re-raised. ``release``: after an OOM, release the
    cached GPU memory."""
    if type(err).__name__ == "OutOfMemoryError" or getattr(err, "kind", None) == "oom":
        if release:
            free_memory()
        if not isinstance(err, BackendError):
            return BackendError(f"out of GPU memory: {err}", kind="oom")
    if isinstance(err, BackendError):
        return err
    raise err


def run_items(
    items: Iterable[T],
    key: Callable[[T], str],
    work: Callable[[list[T]], list[dict[str, Any]]],
    store: ResultStore,
    *,
    batch_size: int = 1,
    concurrency: int = 1,
    policy: RetryPolicy | None = None,
    desc: str = "items",
    progress: bool = True,
    stop: Callable[[], None] | None = None,
) -> dict[str, int]:
    """Run ``work(batch)`` (one fields dict per item) over the items whose key is not yet done in ``store``.

    Batches of ``batch_size`` items, ``concurrency`` at once. A batch that fails (a
    :class:`BackendError`, or out of GPU memory: cached memory is released first) is worked item by
    item, so one bad input fails alone. An item's own call is retried by ``policy``; a
    :class:`BackendError` that is not retryable, or that keeps failing, is stored as ``status: error``
    with its message (and retried by the next run). Other exceptions are bugs and propagate. Returns
    counts ok/error/skipped. Each item is claimed in the store before its call, so when several
    processes share the store an item is called by one of them only; the others count it as skipped
    once its record is there. ``stop()``: called when the run is interrupted, so that calls in
    flight elsewhere (on Ray workers) give up.
    """
    policy = policy or RetryPolicy()
    done = store.done_keys()
    items = list(items)
    todo = [it for it in items if key(it) not in done]
    counts = {"ok": 0, "error": 0, "skipped": len(items) - len(todo)}
    deferred: list[tuple[T, dict[str, Any] | None]] = []

    def record(item: T, fields: dict[str, Any] | None, err: BackendError | None, attempts: int,
               seconds: float) -> dict[str, Any] | None:
        if err is None:
            rec = {store.key: key(item), "status": STATUS_OK, "error": None, **fields}
        else:
            rec = {store.key: key(item), "status": STATUS_ERROR, "error": str(err), "error_kind": err.kind}
        rec["attempts"] = attempts
        rec.setdefault("latency_s", round(seconds, 4))
        return rec if store.append(rec) is rec else None  # another process stored a finished record first

    def call(item: T) -> dict[str, Any]:
        try:
            return work([item])[0]
        except Exception as err:  # noqa: BLE001 - as_backend_error re-raises what is not a model failure
            raise as_backend_error(err) from None

    def alone(item: T) -> dict[str, Any] | None:
        start = time.perf_counter()
        try:
            fields, attempts = call_with_retry(lambda: call(item), policy)
            return record(item, fields, None, attempts, time.perf_counter() - start)
        except BackendError as err:
            attempts = policy.max_attempts if err.retryable else 1
            return record(item, None, err, attempts, time.perf_counter() - start)

    def batch(group: list[T], first_try: bool = True) -> list[Any]:
        """The group's results: a record, None (done elsewhere) or DEFERRED (claimed by another process)."""
        out: list[Any] = []
        chunk = []
        for it in group:
            if store.claim(key(it)):
                chunk.append(it)
            elif store.is_done(key(it), refresh=False):  # another process finished it meanwhile
                out.append(None)
            else:
                if first_try:
                    deferred.append((it, store.get(key(it))))  # another process is working on it right now
                out.append(DEFERRED)
        if len(chunk) > 1:
            start = time.perf_counter()
            try:
                results = work(chunk)
            except Exception as err:  # noqa: BLE001 - as_backend_error re-raises what is not a model failure
                as_backend_error(err, release=True)
            else:
                seconds = (time.perf_counter() - start) / len(chunk)
                return out + [record(it, f, None, 1, seconds) for it, f in zip(chunk, results, strict=True)]
        return out + [alone(it) for it in chunk]

    def count(results: list[Any]) -> None:
        for rec in results:
            if rec is not DEFERRED:
                counts["skipped" if rec is None else rec["status"]] += 1
                bar.update(1)

    size = max(1, int(batch_size))
    groups = [todo[s : s + size] for s in range(0, len(todo), size)]
    bar = tqdm(total=len(todo), desc=desc, disable=not progress, unit="it")
    try:
        with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
            try:  # in the order the batches finish
                finished = (map(batch, groups) if concurrency <= 1 else
                            (f.result() for f in as_completed([pool.submit(batch, group) for group in groups])))
                for results in finished:
                    count(results)
            except BaseException:  # Ctrl-C stops quickly: the calls not started are cancelled
                if stop is not None:
                    stop()
                pool.shutdown(wait=False, cancel_futures=True)
                raise
        # The items another process had claimed: wait for its record of each; take one over (claim it
        # again) only when that process died without storing it.
        while deferred:
            store.refresh()
            waiting, deferred = deferred, []
            for it, before in waiting:
                rec = None if store.get(key(it)) != before else batch([it], first_try=False)[0]
                if rec is DEFERRED:
                    deferred.append((it, before))
                else:
                    count([rec])  # None: the other process stored it (finished or failed)
            if deferred:
                time.sleep(0.1)
    finally:
        bar.close()
    return counts
