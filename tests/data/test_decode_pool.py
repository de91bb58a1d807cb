"""The decode pool: images decoded (and preprocessed) in worker processes come back in order, with bad
files reported as they are when decoding inline."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from unirag.data import decode
from unirag.data.decode import DecodePool, resolve_decode_workers, workers_for
from unirag.encoders.efficientnet import preprocess
from unirag.errors import ConfigError


@pytest.fixture(scope="module")
def photo_paths(tmp_path_factory, coco_mini: Path) -> list[str]:
    """Real photos with a corrupt file and a missing one among them."""
    folder = tmp_path_factory.mktemp("photos")
    photos = sorted((coco_mini / "images").glob("*.jpg"))[:9]
    paths = []
    for i, p in enumerate(photos):
        shutil.copy(p, folder / p.name)
        paths.append(str(folder / p.name))
        if i == 3:
            (folder / "corrupt.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a jpeg at all")
            paths.append(str(folder / "corrupt.jpg"))
        if i == 6:
            paths.append(str(folder / "missing.jpg"))
    return paths


def _jobs(paths: list[str], size: int):
    return [(s, paths[s : s + size]) for s in range(0, len(paths), size)]


def _flatten(results):
    return [(key, d.path, d.reason, None if d.image is None else np.asarray(d.image)) for key, items in results
            for d in items]


@pytest.mark.parametrize("workers", [1, 2])
def test_workers_give_what_inline_decoding_gives_in_order(photo_paths, workers) -> None:
    inline = _flatten(DecodePool(0, preprocess).map(_jobs(photo_paths, 4)))
    with DecodePool(workers, preprocess, prefetch=1) as pool:
        pooled = _flatten(pool.map(_jobs(photo_paths, 4)))
    assert [r[:3] for r in pooled] == [r[:3] for r in inline]
    assert [r[1] for r in pooled] == photo_paths  # order of jobs and of items in each job
    for a, b in zip(inline, pooled, strict=True):
        if a[3] is None:
            assert b[3] is None
        else:
            assert a[3].dtype == np.float32 and a[3].shape == (3, 224, 224)
            np.testing.assert_array_equal(a[3], b[3])
    reasons = {Path(r[1]).name: r[2] for r in pooled if r[2] is not None}
    assert set(reasons) == {"corrupt.jpg", "missing.jpg"}
    assert "not found" in reasons["missing.jpg"] and "cannot decode" in reasons["corrupt.jpg"]


def test_without_a_preprocessor_workers_return_rgb_images(photo_paths) -> None:
    with DecodePool(2) as pool:
        (_, items), = list(pool.map([("k", photo_paths[:2])]))
    assert [d.image.mode for d in items] == ["RGB", "RGB"] and items[0].image.size == (424, 640)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_an_unpicklable_preprocessor_still_works(photo_paths, method, monkeypatch) -> None:
    """Forked workers inherit it; spawned ones cannot get it, so it runs in the caller."""
    monkeypatch.setattr(decode, "start_method", lambda: method)
    lock = threading.Lock()  # cannot be pickled

    def with_lock(image):
        with lock:
            return preprocess(image)

    with DecodePool(2, with_lock) as pool:
        assert (pool._local_preprocess is with_lock) == (method == "spawn")
        (_, items), = list(pool.map([(0, photo_paths[:3])]))
    np.testing.assert_array_equal(items[2].image, preprocess(decode.decode_one(photo_paths[2]).image))


def test_a_script_without_a_main_guard_can_use_workers(photo_paths, tmp_path) -> None:
    """Workers are forked on Linux: the script is not run again in each of them (spawn would)."""
    import subprocess
    import sys

    script = tmp_path / "top_level.py"
    script.write_text(
        "from unirag.data.decode import DecodePool\n"
        f"paths = {photo_paths[:4]!r}\n"
        "print('RUN')\n"
        "with DecodePool(2) as pool:\n"
        "    sizes = [d.image.size for _, items in pool.map([(0, paths[:2]), (1, paths[2:])]) for d in items]\n"
        "print(sizes)\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("RUN") == 1 and "(424, 640)" in proc.stdout


def test_jobs_without_paths_pass_through_in_place(photo_paths) -> None:
    with DecodePool(2) as pool:
        keys = [k for k, _ in pool.map([("a", photo_paths[:1]), ("text", []), ("b", photo_paths[1:3])])]
    assert keys == ["a", "text", "b"]


def test_unwrap_raises_the_inline_error(photo_paths) -> None:
    bad = decode.decode_one(photo_paths[4])
    assert not bad.ok
    with pytest.raises(Exception, match="corrupt.jpg: cannot decode image"):
        bad.unwrap()


def test_worker_settings(monkeypatch) -> None:
    assert resolve_decode_workers("auto") is None and resolve_decode_workers(None) is None
    assert resolve_decode_workers("3") == 3 and resolve_decode_workers(0) == 0
    for bad in (-1, "many"):
        with pytest.raises(ConfigError, match="decode workers"):
            resolve_decode_workers(bad)
    monkeypatch.setattr(decode, "available_cores", lambda: 32)
    assert workers_for(None, None) == decode.AUTO_WORKERS_CAP  # auto: the cores, capped
    assert workers_for(None, 10) == 0  # auto: a small job is decoded inline
    assert workers_for(2, 10) == 2  # an explicit setting is used as is
    assert workers_for(None, 10_000, model_on_cpu=True) == decode.AUTO_WORKERS_CPU_MODEL == 1
    assert workers_for(3, 10_000, model_on_cpu=True) == 3
    monkeypatch.setattr(decode, "available_cores", lambda: 2)
    assert workers_for(None, 10_000) == 2


def test_workers_end_when_their_parent_is_killed(photo_paths, tmp_path) -> None:
    """A build killed with SIGKILL leaves no decode worker behind."""
    import os
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "parent.py"
    script.write_text(
        "import os, time\n"
        "from unirag.data.decode import DecodePool\n"
        f"paths = {photo_paths[:2]!r}\n"
        "pool = DecodePool(2)\n"
        "list(pool.map([(0, paths)]))\n"
        "print(' '.join(str(p) for p in pool._executor._processes), flush=True)\n"
        "time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    workers = [int(p) for p in proc.stdout.readline().split()]
    assert len(workers) == 2
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()

    def alive(pid):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True

    deadline = time.time() + 60
    while any(alive(p) for p in workers) and time.time() < deadline:
        time.sleep(0.5)
    assert not any(alive(p) for p in workers)


# -- the shared-memory slots ------------------------------------------------------------------------
def _segments(pid: int | None = None) -> list[str]:
    import os

    prefix = f"{decode.SHM_PREFIX}{os.getpid() if pid is None else pid}_"
    return sorted(p.name for p in Path("/dev/shm").glob(prefix + "*")) if Path("/dev/shm").is_dir() else []


def test_preprocessed_batches_arrive_in_shared_memory_without_a_copy(photo_paths) -> None:
    """Workers write each preprocessed image into its row of the job's slot; the model's batch is a view of
    those rows (nothing pickled, nothing stacked again), equal to inline decoding. The first job comes
    back pickled: it shows the shape and dtype of the slots."""
    good = [p for p in photo_paths if "corrupt" not in p and "missing" not in p]
    inline = [np.asarray(preprocess(decode.decode_one(p).image)) for p in good]
    seen = []
    with DecodePool(2, preprocess, prefetch=1) as pool:
        for i, (_, items) in enumerate(pool.map(_jobs(good, 2), borrow=True)):  # 4 jobs through 2 slots
            arrays = [d.image for d in items]
            batch = decode.stack_batch(arrays)
            in_slot = pool.ring is not None and any(np.shares_memory(batch, slot) for slot in pool.ring.arrays)
            assert in_slot == (i > 0)
            assert all(np.shares_memory(batch, a) for a in arrays) == (i > 0)
            seen.extend(np.array(a) for a in batch)
        assert i == 4 and pool.ring.rows == 2 and len(pool.ring.arrays) == 2
    assert len(seen) == len(inline)
    for a, b in zip(inline, seen, strict=True):
        np.testing.assert_array_equal(a, b)


def test_without_borrowing_the_arrays_are_the_callers_own(photo_paths) -> None:
    good = [p for p in photo_paths if "corrupt" not in p and "missing" not in p][:6]
    with DecodePool(2, preprocess, prefetch=1) as pool:
        results = list(pool.map(_jobs(good, 2)))  # kept past the next job: must not be recycled
        assert pool.ring is not None
        for _, items in results:
            for d in items:
                assert not any(np.shares_memory(d.image, slot) for slot in pool.ring.arrays)
    for (_, items), start in zip(results, range(0, 6, 2), strict=True):
        for d, p in zip(items, good[start : start + 2], strict=True):
            np.testing.assert_array_equal(d.image, preprocess(decode.decode_one(p).image))


def test_stack_batch_copies_what_is_not_consecutive_rows_of_one_buffer() -> None:
    rows = np.frombuffer(bytearray(4 * 6 * 4), np.float32).reshape(4, 6)
    assert np.shares_memory(decode.stack_batch([rows[1], rows[2], rows[3]]), rows)
    gap = decode.stack_batch([rows[0], rows[2]])  # a skipped (unreadable) image between them
    assert not np.shares_memory(gap, rows)
    np.testing.assert_array_equal(gap, rows[[0, 2]])
    owned = [np.ones(3, np.float32), np.zeros(3, np.float32)]
    np.testing.assert_array_equal(decode.stack_batch(owned), np.stack(owned))


def _as_dict(image):
    return {"pixels": preprocess(image), "size": image.size}


def _raw_pixels(image):
    return np.asarray(image)  # its shape is the photo's: not one for a slot to hold


@pytest.mark.parametrize("fn", [_as_dict, _raw_pixels])
def test_preprocessors_that_return_no_fixed_array_go_back_pickled(photo_paths, fn) -> None:
    with DecodePool(2, fn, prefetch=1) as pool:
        got = [d for _, items in pool.map(_jobs(photo_paths, 3), borrow=True) for d in items]
        assert pool.ring is None or fn is _raw_pixels
    want = [decode.decode_one(p, fn) for p in photo_paths]
    assert [d.path for d in got] == [d.path for d in want] and [d.reason for d in got] == [d.reason for d in want]
    for a, b in zip(want, got, strict=True):
        if a.ok:
            pa, pb = (a.image["pixels"], b.image["pixels"]) if fn is _as_dict else (a.image, b.image)
            np.testing.assert_array_equal(pa, pb)


def test_spawned_workers_write_into_the_slots_too(photo_paths, monkeypatch) -> None:
    monkeypatch.setattr(decode, "start_method", lambda: "spawn")
    with DecodePool(2, preprocess, prefetch=1) as pool:
        got = [np.array(d.image) for _, items in pool.map(_jobs(photo_paths[:4], 2), borrow=True) for d in items]
        assert pool.ring is not None
    for a, p in zip(got, photo_paths[:4], strict=True):
        np.testing.assert_array_equal(a, preprocess(decode.decode_one(p).image))
    assert _segments() == []


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="needs a /dev/shm to look for leaked segments in")
def test_no_segment_is_left_after_a_normal_end_or_an_exception(photo_paths) -> None:
    with DecodePool(2, preprocess, prefetch=1) as pool:
        list(pool.map(_jobs(photo_paths, 3)))
        assert pool.ring is not None and len(_segments()) == 2
    assert _segments() == []
    with pytest.raises(RuntimeError, match="the model failed"), DecodePool(2, preprocess, prefetch=1) as pool:
        for i, _ in enumerate(pool.map(_jobs(photo_paths, 2), borrow=True)):
            if i == 1:
                raise RuntimeError("the model failed")
    assert _segments() == []


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="needs a /dev/shm to look for leaked segments in")
@pytest.mark.parametrize("how", ["KeyboardInterrupt", "exception", "no close"])
def test_no_segment_is_left_when_a_script_is_interrupted_or_fails(photo_paths, tmp_path, how) -> None:
    """Ctrl-C in the middle of a build, an uncaught error, a pool never closed: the segments are unlinked
    by the process itself (the resource tracker reports none leaked) and its workers are gone."""
    import subprocess
    import sys

    # Ctrl-C in a terminal: SIGINT to the whole process group, workers included
    stop = {"KeyboardInterrupt": "os.killpg(os.getpgrp(), signal.SIGINT); time.sleep(5)",
            "exception": "raise RuntimeError('the model failed')", "no close": "break"}[how]
    script = tmp_path / "interrupted.py"
    script.write_text(
        "import os, signal, sys, time\n"
        "from unirag.data.decode import DecodePool\n"
        "from unirag.encoders.efficientnet import preprocess\n"
        f"paths = {photo_paths!r}\n"
        "pool = DecodePool(2, preprocess, prefetch=1)\n"
        "for i, (_, items) in enumerate(pool.map([(s, paths[s:s + 2]) for s in range(0, len(paths), 2)], borrow=True)):\n"
        "    if i == 2:\n"
        "        print(os.getpid(), ' '.join(pool.ring.names), flush=True)\n"
        "        print(' '.join(str(p) for p in pool._executor._processes), flush=True)\n"
        f"        {stop}\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          start_new_session=True)
    first, workers = proc.stdout.splitlines()[:2]
    pid, *names = first.split()
    assert len(names) == 2 and all(n.startswith(f"{decode.SHM_PREFIX}{pid}_") for n in names)
    assert proc.returncode == {"KeyboardInterrupt": -2, "exception": 1, "no close": 0}[how], proc.stderr[-2000:]
    assert ("KeyboardInterrupt" in proc.stderr) == (how == "KeyboardInterrupt")
    assert "leaked shared_memory" not in proc.stderr
    assert _segments(int(pid)) == []
    assert len(workers.split()) == 2 and not any(_alive(int(w)) for w in workers.split())


def _alive(pid: int) -> bool:
    import os
    import time

    for _ in range(40):  # reaped by now, or ending on its own (its parent is gone)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        time.sleep(0.25)
    return True


def test_without_room_in_shared_memory_results_go_back_pickled(photo_paths, monkeypatch) -> None:
    """A small /dev/shm (a container's 64 MB) gets no slots: a worker writing past it would die of SIGBUS."""
    monkeypatch.setattr(decode.SlotRing, "fits", staticmethod(lambda slots, nbytes: False))
    with DecodePool(2, preprocess, prefetch=1) as pool:
        got = [d for _, items in pool.map(_jobs(photo_paths, 3), borrow=True) for d in items]
        assert pool.ring is None
    for d, p in zip(got, photo_paths, strict=True):
        want = decode.decode_one(p, preprocess)
        assert d.reason == want.reason
        if want.ok:
            np.testing.assert_array_equal(d.image, want.image)
