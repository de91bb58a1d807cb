"""Run local models over items in batches, storing each finished item at once.

API backends are parallelised by :func:`unirag.runs.executor.run_items`; a local model on one GPU
is faster with batched forward passes instead. A failed batch is retried item by item so that
one bad input fails alone, exactly as it would in the per-item executor.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from tqdm.auto import tqdm

from unirag.errors import BackendError
from unirag.runs.executor import DEFERRED, settle_deferred
from unirag.runs.store import STATUS_ERROR, STATUS_OK, ResultStore

T = TypeVar("T")


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
            except BackendError:
                results = None
            if results is not None:
                per_item = (time.perf_counter() - t0) / len(chunk)
                for item, fields in zip(chunk, results, strict=True):
                    record(item, fields, None, per_item)
            else:
                for item in chunk:  # isolate the failing item(s)
                    t1 = time.perf_counter()
                    try:
                        fields = work_batch([item])[0]
                        record(item, fields, None, time.perf_counter() - t1)
                    except BackendError as err:
                        record(item, None, err, time.perf_counter() - t1)
            bar.update(min(batch_size, len(todo) - start))

    def take_over(item: T) -> Any:
        if not store.claim(key(item)):
            return None if store.is_done(key(item), refresh=False) else DEFERRED
        t1 = time.perf_counter()
        try:
            record(item, work_batch([item])[0], None, time.perf_counter() - t1)
        except BackendError as err:
            record(item, None, err, time.perf_counter() - t1)
        return store.get(key(item))

    for rec in settle_deferred(store, deferred, key, take_over):
        if rec is None:
            counts["skipped"] += 1
    return counts
