"""The search batcher (serve/batching.py): a lone request goes at once; under load the clients of the
last batch, coming back one after another, are gathered into one batch rather than a batch of one
followed by the rest."""

from __future__ import annotations

import asyncio
import time

from unirag.serve.batching import SearchBatcher


def _recording(calls: list[list], seconds: float):
    def search_batch(queries, k, modality):
        calls.append(list(queries))
        time.sleep(seconds)
        return [[f"{q}-hit"] for q in queries]

    return search_batch


def test_returning_clients_form_one_batch_not_a_batch_of_one_and_the_rest():
    calls: list[list] = []
    # 0.4 s per call: the gathering window after a batch is half of that (0.2 s), far above the stagger
    batcher = SearchBatcher(_recording(calls, 0.4), max_wait=5.0)

    async def scenario():
        first = await asyncio.gather(*(batcher.search(f"a{i}", k=3, modality="any") for i in range(4)))

        async def client(i):  # four clients whose next requests arrive 10 ms apart
            await asyncio.sleep(0.01 * i)
            return await batcher.search(f"b{i}", k=3, modality="any")

        second = await asyncio.gather(*(client(i) for i in range(4)))
        await batcher.close()
        return first, second

    first, second = asyncio.run(scenario())
    assert first == [[f"a{i}-hit"] for i in range(4)] and second == [[f"b{i}-hit"] for i in range(4)]
    assert [len(c) for c in calls] == [4, 4]


def test_each_batch_reports_its_size_and_duration():
    calls: list[list] = []
    seen: list[tuple[int, float]] = []
    batcher = SearchBatcher(_recording(calls, 0.05), on_batch=lambda size, seconds: seen.append((size, seconds)))

    async def scenario():
        await asyncio.gather(*(batcher.search(f"q{i}", k=1, modality="any") for i in range(3)))
        await batcher.close()

    asyncio.run(scenario())
    assert [size for size, _ in seen] == [len(c) for c in calls] == [3]
    assert all(seconds >= 0.05 for _, seconds in seen)  # the call slept 50 ms


def test_a_lone_client_is_never_held_back():
    calls: list[list] = []
    batcher = SearchBatcher(_recording(calls, 0.0), max_wait=30.0)  # a window would show as a 30 s hang

    async def scenario():
        out = [await batcher.search(f"q{i}", k=1, modality="any") for i in range(5)]
        await batcher.close()
        return out

    assert asyncio.run(asyncio.wait_for(scenario(), 20)) == [[f"q{i}-hit"] for i in range(5)]
    assert [len(c) for c in calls] == [1] * 5
