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
    Before each item the store is re-read, so an item another process sharing the store finished
    meanwhile is skipped (and counted as skipped), not done twice.
    """
    policy = policy or RetryPolicy()
    done = store.done_keys()
    items = list(items)
    todo = [it for it in items if key(it) not in done]
    counts = {"ok": 0, "error": 0, "skipped": len(items) - len(todo)}

    def one(item: T) -> dict[str, Any] | None:
        start = time.perf_counter()
        k = key(item)
        if store.is_done(k):  # another process sharing the store finished it meanwhile
            return None
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

    def count(rec: dict[str, Any] | None) -> None:
        counts["skipped" if rec is None else rec["status"]] += 1

    bar = tqdm(total=len(todo), desc=desc, disable=not progress, unit="it")
    try:
        if concurrency <= 1:
            for it in todo:
                count(one(it))
                bar.update(1)
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
                            bar.update(1)
                            nxt = next(iterator, None)
                            if nxt is not None:
                                pending.add(pool.submit(one, nxt))
                except BaseException:
                    for fut in pending:
                        fut.cancel()
                    raise
    finally:
        bar.close()
    return counts
