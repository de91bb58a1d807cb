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
