"""Run local models over items in batches, storing each finished item at once.

API backends are parallelised by :func:`unirag.runs.executor.run_items`; a local model on one GPU
is faster with batched forward passes instead. A failed batch is retried item by item so that
one bad input fails alone, exactly as it would in the per-item executor. Running out of GPU memory
counts as such a failure too (backends raise it as a :class:`BackendError` of kind ``oom``; a raw
``torch.OutOfMemoryError`` from a plugin is treated the same): cached GPU memory is released and the
batch's items are tried one by one, so only an item too big on its own is recorded as failed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from tqdm.auto import tqdm

from unirag.errors import BackendError
from unirag.runs.claims import DEFERRED, settle_deferred
from unirag.runs.store import STATUS_ERROR, STATUS_OK, ResultStore

T = TypeVar("T")


def is_out_of_memory(err: BaseException) -> bool:
    """A GPU out-of-memory error, however it was raised (torch's class or a backend's ``oom`` error)."""
    return type(err).__name__ == "OutOfMemoryError" or getattr(err, "kind", None) == "oom"


def _as_backend_error(err: BaseException) -> BackendError:
    """An item's failure as a BackendError; anything but a BackendError or an OOM is a bug and re-raised."""
    if isinstance(err, BackendError):
        return err
    if is_out_of_memory(err):
        return BackendError(f"out of GPU memory: {err}", kind="oom")
    raise err


def _work_one(work_batch: Callable[[list[T]], list[dict[str, Any]]], item: T) -> dict[str, Any]:
    try:
        return work_batch([item])[0]
    except Exception as err:  # noqa: BLE001 - _as_backend_error re-raises what is not a model failure
        raise _as_backend_error(err) from None


def run_batches(items: Iterable[T], key: Callable[[T], str],
                work_batch: Callable[[list[T]], list[dict[str, Any]]], store: ResultStore, *, batch_size: int,
                desc: str = "batches", progress: bool = True) -> dict[str, int]:
    """Like ``run_items`` but ``work_batch(items) -> one fields dict per item``. Returns counts."""
    done = store.done_keys()
    items = list(items)
    todo = [it for it in items if key(it) not in done]
    counts = {"ok": 0, "error": 0, "skipped": len(items) - len(todo)}
    batch_size = max(1, int(batch_size))
    deferred: list[tuple[T, dict[str, Any] | None]] = []

    def record(item: T, fields: dict[str, Any] | None, err: BackendError | None, seconds: float) -> None:
        if err is None:
            rec = {store.key: key(item), "status": STATUS_OK, "error": None, **fields}
        else:
            rec = {store.key: key(item), "status": STATUS_ERROR, "error": str(err), "error_kind": err.kind}
        rec["attempts"] = 1
        rec.setdefault("latency_s", round(seconds, 4))
        stored = store.append(rec)
        counts[rec["status"] if stored is rec else "skipped"] += 1

    with tqdm(total=len(todo), desc=desc, disable=not progress, unit="it") as bar:
        for start in range(0, len(todo), batch_size):
            chunk = []
            for it in todo[start:start + batch_size]:
                if store.claim(key(it)):
                    chunk.append(it)
                elif store.is_done(key(it), refresh=False):
                    counts["skipped"] += 1  # finished by another process sharing the store
                else:
                    deferred.append((it, store.get(key(it))))  # being worked on by another process
            if not chunk:
                bar.update(min(batch_size, len(todo) - start))
                continue
            t0 = time.perf_counter()
            try:
                results = work_batch(chunk)
            except Exception as err:  # noqa: BLE001 - _as_backend_error re-raises what is not a model failure
                if is_out_of_memory(_as_backend_error(err)):
                    from unirag.runtime import free_memory

                    free_memory()
                results = None
            if results is not None:
                per_item = (time.perf_counter() - t0) / len(chunk)
                for item, fields in zip(chunk, results, strict=True):
                    record(item, fields, None, per_item)
            else:
                for item in chunk:  # isolate the failing item(s)
                    t1 = time.perf_counter()
                    try:
                        fields = _work_one(work_batch, item)
                        record(item, fields, None, time.perf_counter() - t1)
                    except BackendError as err:
                        record(item, None, err, time.perf_counter() - t1)
            bar.update(min(batch_size, len(todo) - start))

    def take_over(item: T) -> Any:
        if not store.claim(key(item)):
            return None if store.is_done(key(item), refresh=False) else DEFERRED
        t1 = time.perf_counter()
        try:
            record(item, _work_one(work_batch, item), None, time.perf_counter() - t1)
        except BackendError as err:
            record(item, None, err, time.perf_counter() - t1)
        return store.get(key(item))

    for rec in settle_deferred(store, deferred, key, take_over):
        if rec is None:
            counts["skipped"] += 1
    return counts
