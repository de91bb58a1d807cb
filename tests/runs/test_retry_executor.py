"""Retry policy and the concurrent run loop."""

from __future__ import annotations

import threading
import time

import pytest

from unirag.errors import BackendError
from unirag.runs.executor import run_items
from unirag.runs.retry import RetryPolicy, call_with_retry, is_retryable_status
from unirag.runs.store import ResultStore


def test_retry_after_is_honoured_and_capped():
    p = RetryPolicy(max_retry_after=10)
    assert p.delay(1, retry_after=3.0) == 3.0
    assert p.delay(1, retry_after=500.0) == 10
    for attempt in range(1, 8):
        assert 0 <= p.delay(attempt) <= min(p.max_delay, p.base_delay * 2 ** (attempt - 1))


@pytest.mark.parametrize("status,expected", [(429, True), (500, True), (503, True), (400, False), (401, False),
                                             (404, False), (None, False)])
def test_retryable_status(status, expected):
    assert is_retryable_status(status) is expected


def test_transient_errors_retried_until_success():
    calls, waits = [], []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise BackendError("429", retryable=True, retry_after=0.25)
        return "ok"

    result, attempts = call_with_retry(flaky, RetryPolicy(max_attempts=5), sleep=waits.append)
    assert (result, attempts) == ("ok", 3)
    assert waits == [0.25, 0.25]


def test_permanent_error_is_not_retried():
    calls = []

    def bad():
        calls.append(1)
        raise BackendError("400 bad request", retryable=False, status=400)

    with pytest.raises(BackendError, match="400"):
        call_with_retry(bad, RetryPolicy(max_attempts=5), sleep=lambda s: None)
    assert len(calls) == 1


def test_run_items_stores_each_result_and_skips_done(tmp_path):
    store = ResultStore(tmp_path / "o.jsonl")
    store.append({"qid": "0", "status": "ok", "caption": "already"})
    seen = []

    def work(i):
        seen.append(i)
        if i == 3:
            raise BackendError("permanent", retryable=False)
        return {"caption": f"c{i}"}

    counts = run_items(range(6), key=str, work=lambda its: [work(its[0])], store=store, concurrency=3, progress=False,
                       policy=RetryPolicy(max_attempts=2, base_delay=0))
    assert sorted(seen) == [1, 2, 3, 4, 5]
    assert counts == {"ok": 4, "error": 1, "skipped": 1}
    assert store.get("3")["status"] == "error" and "permanent" in store.get("3")["error"]
    assert store.get("0")["caption"] == "already"
    store.close()


def test_run_items_is_concurrent_but_bounded(tmp_path):
    store = ResultStore(tmp_path / "o.jsonl")
    active, peak, lock = [0], [0], threading.Lock()

    def work(i):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.02)
        with lock:
            active[0] -= 1
        return {}

    run_items(range(40), key=str, work=lambda its: [work(its[0])], store=store, concurrency=4, progress=False)
    assert 2 <= peak[0] <= 4
    assert len(store.done_keys()) == 40
    store.close()
