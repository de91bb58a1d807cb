"""Small FAISS searches run on the calling thread alone (``unirag.index.store.serial_when_small``)."""

from __future__ import annotations

import threading

import faiss
import numpy as np

from unirag import Index
from unirag.index import store


def test_small_work_runs_serially_on_this_thread_only_and_restores_the_setting():
    faiss.omp_set_num_threads(2)
    seen: dict[str, int] = {}
    with store.serial_when_small(store.SERIAL_SEARCH_WORK - 1):
        seen["inside"] = faiss.omp_get_max_threads()
        other = threading.Thread(target=lambda: seen.setdefault("other thread", faiss.omp_get_max_threads()))
        other.start()
        other.join()
    seen["after"] = faiss.omp_get_max_threads()
    with store.serial_when_small(store.SERIAL_SEARCH_WORK):
        seen["large"] = faiss.omp_get_max_threads()
    assert seen == {"inside": 1, "other thread": 2, "after": 2, "large": 2}


def test_a_serial_search_returns_the_bits_of_a_parallel_one(coco_index, monkeypatch):
    """16 queries (under FAISS's BLAS threshold of 20, as the service's batches are) and 40 (over it)."""
    faiss.omp_set_num_threads(2)
    index = Index.open(coco_index)
    rng = np.random.default_rng(0)
    for n in (16, 40):
        queries = rng.standard_normal((n, index.dim)).astype(np.float32)
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
        monkeypatch.setattr(store, "SERIAL_SEARCH_WORK", 0)  # never serial
        parallel = index.topk(queries, 10)
        monkeypatch.setattr(store, "SERIAL_SEARCH_WORK", 1 << 62)  # always serial
        serial = index.topk(queries, 10)
        for a, b in zip(parallel, serial, strict=True):
            assert np.array_equal(a, b)
