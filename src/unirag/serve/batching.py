"""Answer concurrent searches with one encoder/FAISS call (adaptive micro-batching).

Requests wait in a queue; one worker takes *everything* queued at that moment (up to
``max_batch``), groups it by (k, modality) and hands each group to ``search_batch`` on one worker
thread. A lone request is therefore answered at once (no batching window, no added latency), while
under load the requests that arrive during one call form the next batch - the batch size grows with
the load, which is when encoding many queries in one forward pass and one FAISS call pays off.

Under load, one thing more: when a batch of n searches has just been answered, its n clients send
their next requests one after another, and taking only the first of them would start a batch of
one - which costs an encoder call nearly as much as a full batch does (30 ms for one sentence with
the offline encoder, 5 ms each in a batch of 60), so the batches would alternate between large and
tiny. The worker therefore gathers until the last batch's clients are back - as many requests as
that batch held, plus those that arrived while it ran - or until a short window has passed: half of
what the last batch took, at most ``max_wait`` seconds. Counting the arrivals too lets two groups of
clients that fell out of step (batches of 8 and 8 taking turns instead of 16 at once; each batch costs
a forward pass, so 16 clients got 270-300 instead of 330-370 searches/s) merge again. After a batch of
one (a lone client) with nothing queued there is no window at all.
Batched searches run on one thread: the engine's model thread, which every other encoder user (example
retrieval for captions and images) shares, so they never overlap.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any


@dataclass
class _Pending:
    query: Any
    key: tuple
    future: asyncio.Future = field(repr=False)


class SearchBatcher:
    """``await batcher.search(query, k=..., modality=...)`` -> that query's hits.

    ``search_batch(queries, k, modality)`` is the blocking batch function (one list of hits per
    query, in order); ``on_batch(size, seconds)`` is told each batch's size and how long it took
    (for /metrics); ``executor``: the thread ``search_batch`` runs on (None: one of the batcher's own).
    """

    def __init__(self, search_batch: Callable[[Sequence[Any], int, str], list], *, max_batch: int = 64,
                 max_wait: float = 0.02, on_batch: Callable[[int, float], None] | None = None,
                 executor: ThreadPoolExecutor | None = None) -> None:
        self._search_batch = search_batch
        self.max_batch = max_batch
        self.max_wait = max_wait
        self._on_batch = on_batch
        self._queue: asyncio.Queue[_Pending] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._worker: asyncio.Task | None = None
        self._owns_executor = executor is None
        self._executor = executor or ThreadPoolExecutor(max_workers=1, thread_name_prefix="unirag-search")

    async def search(self, query: Any, *, k: int, modality: str) -> list:
        loop = asyncio.get_running_loop()
        if self._queue is None or self._loop is not loop:  # first call, or a new event loop (test clients)
            self._loop, self._queue = loop, asyncio.Queue()
            self._worker = loop.create_task(self._run(self._queue))
        future = loop.create_future()
        await self._queue.put(_Pending(query, (k, modality), future))
        return await future

    async def _run(self, queue: asyncio.Queue) -> None:
        loop = asyncio.get_running_loop()
        last_size, last_took = 1, 0.0
        while True:
            want = min(self.max_batch, last_size + queue.qsize())  # arrived during the last batch, + its clients
            batch = [await queue.get()]
            while len(batch) < self.max_batch and not queue.empty():
                batch.append(queue.get_nowait())
            if len(batch) < want:  # the last batch's clients are coming back
                deadline = loop.time() + min(self.max_wait, last_took / 2)
                while len(batch) < want and (left := deadline - loop.time()) > 0:
                    try:
                        batch.append(await asyncio.wait_for(queue.get(), left))
                    except TimeoutError:
                        break
            start = loop.time()
            groups: dict[tuple, list[_Pending]] = {}
            for item in batch:
                groups.setdefault(item.key, []).append(item)
            for (k, modality), items in groups.items():
                live = [p for p in items if not p.future.done()]  # a client that went away
                if not live:
                    continue
                began = loop.time()
                try:
                    results = await loop.run_in_executor(self._executor, self._search_batch,
                                                         [p.query for p in live], k, modality)
                except Exception as e:  # noqa: BLE001 - delivered to every waiting request
                    for p in live:
                        if not p.future.done():
                            p.future.set_exception(e)
                    continue
                finally:
                    if self._on_batch is not None:
                        self._on_batch(len(live), loop.time() - began)
                for p, hits in zip(live, results, strict=True):
                    if not p.future.done():
                        p.future.set_result(hits)
            last_size, last_took = len(batch), loop.time() - start

    async def close(self) -> None:
        if self._worker is not None and self._loop is asyncio.get_running_loop():
            self._worker.cancel()
            try:
                await self._worker
            except asyncio.CancelledError:
                pass
        self._worker = self._queue = self._loop = None
        if self._owns_executor:
            self._executor.shutdown(wait=False, cancel_futures=True)
