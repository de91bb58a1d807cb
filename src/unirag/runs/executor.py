"""Run many independent calls concurrently, bounded, each retried, each result stored at once.

Used by every stage that calls a model per item (captioning, image generation, X^R agents): the
caller supplies the items still to do and a function per item; finished items go straight to a
:class:`~unirag.runs.store.ResultStore`, so Ctrl-C or a crash loses at most the calls in flight.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, TypeVar

from tqdm.auto import tqdm

from unirag.errors import BackendError
from unirag.runs.retry import RetryPolicy, call_with_retry
from unirag.runs.store import STATUS_ERROR, STATUS_OK, ResultStore

T = TypeVar("T")


#: returned for an item another live process has claimed (see ResultStore.claim)
DEFERRED = object()


def settle_deferred(store: ResultStore, deferred: list[tuple[T, dict[str, Any] | None]], key: Callable[[T], str],
                    attempt: Callable[[T], Any], poll_s: float = 0.1) -> list[dict[str, Any] | None]:
    """Finish the items another process had claimed: wait for its record for each; take an item over
    (``attempt`` claims it again) only when that process died without storing it.

    Returns one result per item: None when the other process stored it (skipped here), else what
    ``attempt`` returned.
    """
    results: list[dict[str, Any] | None] = []
    waiting = list(deferred)
    while waiting:
        store.refresh()
        still = []
        for item, before in waiting:
            if store.get(key(item)) != before:  # the other process stored it (finished or failed)
                results.append(None)
                continue
            rec = attempt(item)
            if rec is DEFERRED:
                still.append((item, before))
            else:
                results.append(rec)
        waiting = still
        if waiting:
            time.sleep(poll_s)
    return results


def run_items(
    items: Iterable[T],
    key: Callable[[T], str],
    work: Callable[[T], dict[str, Any]],
    store: ResultStore,
    *,
    concurrency: int = 1,
    policy: RetryPolicy | None = None,
    desc: str = "items",
    progress: bool = True,
) -> dict[str, int]:
    """Run ``work(item)`` for each item whose key is not yet done in ``store``.

    ``work`` returns the output fields of a successful item; a :class:`BackendError` that is not
    retryable, or that keeps failing, is stored as ``status: error`` with its message (and retried
    by the next run). Other exceptions are bugs and propagate. Returns counts ok/error/skipped.
    Each item is claimed in the store before its call, so when several processes share the store
    an item is called by one of them only; the others count it as skipped once its record is there.
    """
    policy = policy or RetryPolicy()
    done = store.done_keys()
    items = list(items)
    todo = [it for it in items if key(it) not in done]
    counts = {"ok": 0, "error": 0, "skipped": len(items) - len(todo)}
    deferred: list[tuple[T, dict[str, Any] | None]] = []

    def one(item: T, first_try: bool = True) -> Any:
        start = time.perf_counter()
        k = key(item)
        if not store.claim(k):
            if store.is_done(k, refresh=False):  # another process finished it meanwhile
                return None
            if first_try:
                deferred.append((item, store.get(k)))  # another process is working on it right now
            return DEFERRED
        try:
            fields, attempts = call_with_retry(lambda: work(item), policy)
            rec = {store.key: k, "status": STATUS_OK, "error": None, **fields}
        except BackendError as err:
            attempts = policy.max_attempts if err.retryable else 1
            rec = {store.key: k, "status": STATUS_ERROR, "error": str(err), "error_kind": err.kind}
        rec["attempts"] = attempts
        rec.setdefault("latency_s", round(time.perf_counter() - start, 4))
        if store.append(rec) is not rec:  # another process stored a finished record first: it stands
            return None
        return rec

    def count(rec: Any) -> None:
        if rec is DEFERRED:
            return
        counts["skipped" if rec is None else rec["status"]] += 1
        bar.update(1)

    bar = tqdm(total=len(todo), desc=desc, disable=not progress, unit="it")
    try:
        if concurrency <= 1:
            for it in todo:
                count(one(it))
        else:
            with ThreadPoolExecutor(max_workers=concurrency) as pool:
                pending: set[Future] = set()
                iterator = iter(todo)
                # Keep only ~2x concurrency futures alive so Ctrl-C stops quickly.
                for it in iterator:
                    pending.add(pool.submit(one, it))
                    if len(pending) >= 2 * concurrency:
                        break
                try:
                    while pending:
                        finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                        for fut in finished:
                            count(fut.result())
                            nxt = next(iterator, None)
                            if nxt is not None:
                                pending.add(pool.submit(one, nxt))
                except BaseException:
                    for fut in pending:
                        fut.cancel()
                    raise
        for rec in settle_deferred(store, deferred, key, lambda it: one(it, first_try=False)):
            count(rec)
    finally:
        bar.close()
    return counts
