"""Fixtures for the service tests: the bundled real sample (51 COCO photos) indexed once per session
(``demo``, tests/conftest.py, shared with the API tests)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from ray_cluster import free_port

SAMPLE = Path(__file__).resolve().parents[2] / "src" / "unirag" / "demo" / "data"
PHOTOS = sorted((SAMPLE / "images").glob("*.jpg"))


@pytest.fixture(scope="session")
def demo_index(demo) -> Path:
    """The bundled sample's index with the offline encoder (tests/conftest.py ``demo``: once per session)."""
    return demo["index"]


@pytest.fixture(scope="session")
def engine(demo_index):
    """One loaded engine (encoder + index + offline generators) shared by the API tests."""
    from unirag.serve.engine import Engine
    from unirag.serve.settings import ServeSettings

    eng = Engine(ServeSettings(index=demo_index))
    yield eng
    eng.close()


@pytest.fixture
def photo_bytes() -> bytes:
    return PHOTOS[0].read_bytes()


@contextlib.contextmanager
def serve_process(index: Path, log_dir: Path, *args: str, env: dict[str, str] | None = None):
    """``unirag serve --index INDEX ARGS`` on a free loopback port; yields its base URL, stops it afterwards."""
    port = free_port()
    log = log_dir / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "unirag", "serve", "--index", str(index),
                                 "--port", str(port), *args],
                                stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"unirag serve exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(url + "/healthz", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"unirag serve did not answer /healthz in time:\n{log.read_text()[-3000:]}")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
