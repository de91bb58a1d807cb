"""The Ray actor class itself (``unirag.runs.engine._Worker``), called in this process from two threads
as Ray calls a threaded actor: with decode workers, the call that waits for the model has its images
decoded by the actor's decode processes meanwhile, the model's threads decode no image file, the
records are those of inline decoding (an unreadable file included), the model part never runs twice
at once, and a call still waiting when the worker shuts down gives up before the model (nothing of it is
stored)."""

from __future__ import annotations

import functools
import hashlib
import json
import threading
import time
from pathlib import Path

import pytest

from unirag.data import images
from unirag.errors import BackendError, InputError, UniragError
from unirag.runs.engine import CANCELLED, _Worker
from unirag.runs.executor import run_items
from unirag.runs.retry import RetryPolicy
from unirag.runs.store import ResultStore


class _Model:
    """What a recipe loads: records which threads are inside the model at once."""

    def __init__(self) -> None:
        self.inside = 0
        self.most_inside = 0
        self.lock = threading.Lock()


class _Recipe:
    key = "model"

    def load(self, device):
        return _Model()

    def describe(self, model):
        return {}


class _Work:
    """A run kind on the model: each payload is (name, image paths); its record is a digest of the pixels
    ``load_rgb`` gives for those paths (given the images the worker decoded ahead). ``gate`` (an Event)
    holds the model part of a call open."""

    batches = True
    batch_size = 2

    def __init__(self, gate: threading.Event | None, model: _Model) -> None:
        self.model, self.gate = model, gate
        self.calls = 0

    def image_paths(self, payloads):
        return [p for _, paths in payloads for p in paths]

    def work_batch(self, payloads, decoded):
        m = self.model
        with m.lock:
            m.inside += 1
            m.most_inside = max(m.most_inside, m.inside)
        try:
            self.calls += 1
            if self.gate is not None and self.calls == 1:
                assert self.gate.wait(60), "the second call never came in"
            out = []
            for _, paths in payloads:
                h = hashlib.sha256()
                for p in paths:
                    try:
                        im = images.load_rgb(p, ahead=decoded)
                    except InputError as e:
                        raise BackendError(f"bad input: {e}") from None
                    h.update(im.tobytes())
                out.append({"pixels": h.hexdigest()[:16], "n_images": len(paths)})
            return out
        finally:
            with m.lock:
                m.inside -= 1


def _run(worker: _Worker, store_path: Path, payloads, gate: threading.Event | None = None, work=_Work):
    """The driver's call, as :func:`unirag.runs.executor.execute` makes it over Ray: the driver claims and
    stores the items of one call (run_items), the worker is handed the run's name, how to open its kind on
    the model and the payloads."""
    with ResultStore(store_path) as store:
        return run_items(payloads, lambda kp: kp[0], lambda kps: worker.run(
            str(store_path), functools.partial(work, gate), [p for _, p in kps]), store, batch_size=len(payloads),
            policy=RetryPolicy(max_attempts=1), progress=False)


def _calls(coco_mini: Path) -> list[list[tuple[str, tuple[str, list[str]]]]]:
    photos = sorted(str(p) for p in (coco_mini / "images").iterdir())[:9]
    missing = str(coco_mini / "images" / "no-such-photo.jpg")
    items = [(f"q{i}", [photos[i], photos[(i + 1) % 9], photos[(i + 2) % 9]]) for i in range(6)]
    items[4][1][1] = missing  # one unreadable example: that item fails, with the inline message
    payloads = [(name, (name, paths)) for name, paths in items]
    return [payloads[0:3], payloads[3:6]]


def _records(path: Path) -> dict[str, dict]:
    recs = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    return {r["qid"]: {k: r.get(k) for k in ("status", "error", "pixels", "n_images")} for r in recs}


def _two_calls_in_flight(calls, workers: int, out: Path, monkeypatch) -> bool:
    """The driver's two calls to one worker: the second enters while the first holds the model, whose
    model part waits (with decode workers) until the second has handed its images to the decode
    processes. Returns whether it did."""
    from unirag.data import loader

    submitted = threading.Event()
    first: list = []
    second = {str(p) for _, (_, paths) in calls[1] for p in paths}
    real = loader.ImageLoader.map

    def decode_map(self, jobs):
        jobs = list(jobs)
        if {p for _, paths in jobs for p in paths} == second:
            submitted.set()
        return real(self, jobs)

    monkeypatch.setattr(loader.ImageLoader, "map", decode_map)
    worker = _Worker(_Recipe(), "cpu", None, decode=workers)
    gate = submitted if workers else threading.Event()
    if not workers:
        gate.set()
    results: list = [None, None]

    def call(i: int) -> None:
        results[i] = _run(worker, out, calls[i], gate)

    try:
        threads = [threading.Thread(target=call, args=(i,)) for i in (0, 1)]
        first.append(threads[0])
        threads[0].start()
        threads[1].start()
        for t in threads:
            t.join(120)
            assert not t.is_alive()
        assert [sum(r.values()) for r in results] == [3, 3] and sum(r["ok"] for r in results) == 5
        assert worker.model.most_inside == 1  # the model part of the two calls never overlapped
    finally:
        worker.shutdown()
    return submitted.is_set()


def test_the_next_call_s_images_are_decoded_by_the_workers_while_the_model_works(coco_mini, tmp_path,
                                                                                  decoded_here, monkeypatch):
    import ray  # imported, not started: a worker called outside Ray must not start one (it checks for cancels)

    calls = _calls(coco_mini)
    n_images = sum(len(paths) for c in calls for _, (_, paths) in c)
    records = {}
    for workers in (0, 2):
        decoded_here.clear()
        overlapped = _two_calls_in_flight(calls, workers, tmp_path / f"out{workers}.jsonl", monkeypatch)
        records[workers] = _records(tmp_path / f"out{workers}.jsonl")
        if workers == 0:
            # every readable image, in the model's threads, and q3's three again: the call [q3, q4, q5]
            # failed on q4's missing file and was retried item by item
            assert len(decoded_here) == n_images - 1 + 3
        else:
            assert overlapped  # the first call's model part waited for the second call's submission
            assert decoded_here == []  # the decode processes decoded them all, once (the retry included)
    assert not ray.is_initialized()
    assert records[2] == records[0]
    assert records[0]["q4"]["status"] == "error" and "no-such-photo.jpg" in records[0]["q4"]["error"]
    assert sum(r["status"] == "ok" for r in records[0].values()) == 5


def test_a_call_waiting_for_the_model_at_shutdown_gives_up(coco_mini, tmp_path):
    calls = _calls(coco_mini)
    gate = threading.Event()
    worker = _Worker(_Recipe(), "cpu", None, decode=1)
    errors: list = []

    def call(i: int) -> None:
        try:
            _run(worker, tmp_path / "out.jsonl", calls[i], gate)
        except UniragError as e:
            errors.append((i, str(e)))

    t0 = threading.Thread(target=call, args=(0,))
    t0.start()
    while not worker.tasks or worker.model.inside == 0:  # the first call is in the model
        time.sleep(0.001)
    t1 = threading.Thread(target=call, args=(1,))
    t1.start()
    stopper = threading.Thread(target=worker.shutdown)
    stopper.start()
    while not worker._stopping:
        time.sleep(0.001)
    gate.set()  # the first call finishes; the second must then give up
    for t in (t0, t1, stopper):
        t.join(120)
        assert not t.is_alive()
    assert errors == [(1, CANCELLED)]
    stored = _records(tmp_path / "out.jsonl")
    assert set(stored) == {"q0", "q1", "q2"}  # the second call's items never reached the model
    import multiprocessing

    deadline = time.time() + 30
    while multiprocessing.active_children() and time.time() < deadline:
        time.sleep(0.1)
    assert multiprocessing.active_children() == []  # its decode processes are gone


def test_a_call_whose_model_part_fails_leaves_the_decode_processes_usable(coco_mini, tmp_path, decoded_here):
    calls = _calls(coco_mini)

    class Broken(_Work):
        def work_batch(self, payloads, decoded):
            raise KeyError("a bug in the task")

    worker = _Worker(_Recipe(), "cpu", None, decode=1)
    try:
        with pytest.raises(KeyError):
            _run(worker, tmp_path / "broken.jsonl", calls[0], work=Broken)
        result = _run(worker, tmp_path / "ok.jsonl", calls[1])
    finally:
        worker.shutdown()
    assert result["ok"] == 2 and result["error"] == 1
    assert decoded_here == []
