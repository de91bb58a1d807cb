"""``unirag serve --workers N``: several processes behind one port, each answering as the in-process
retriever does, with /metrics summed over all of them; bad worker counts refused before anything loads."""

from __future__ import annotations

import json
import re
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from unirag.errors import ConfigError
from unirag.serve.settings import ServeSettings

from .conftest import SAMPLE, free_port, serve_process


def test_settings_reach_the_worker_processes_unchanged():
    settings = ServeSettings(index=SAMPLE / "index", generator=None, cors_origins=["https://a.example"],
                             generator_options={"timeout": 5.0}, max_batch=8, workers=3)
    back = ServeSettings.from_json(settings.to_json())
    assert back == ServeSettings(**{**vars(settings), "index": str(settings.index)})


def test_fewer_than_one_worker_is_refused():
    with pytest.raises(ConfigError, match="--workers"):
        ServeSettings(index="x", workers=0).check()


def _post(url: str, fields: dict) -> dict:
    body = urllib.parse.urlencode(fields).encode()
    with urllib.request.urlopen(urllib.request.Request(url + "/v1/search", data=body), timeout=60) as r:
        return json.loads(r.read())


@pytest.mark.subprocess  # through serve_process
def test_two_workers_answer_like_the_retriever_and_metrics_count_both(demo_index, engine, tmp_path):
    texts = [a["caption"] for a in json.loads((SAMPLE / "captions.json").read_text())["annotations"]][:12]
    with serve_process(demo_index, tmp_path, "--workers", "2") as url:
        with ThreadPoolExecutor(8) as pool:  # concurrent, so that both processes get requests and batches
            answers = list(pool.map(lambda t: _post(url, {"text": t, "k": "5"}), texts * 2))
        with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
            metrics = r.read().decode()
    for text, answer in zip(texts * 2, answers, strict=True):
        alone = engine.retriever.search(text=text, k=5)
        assert [h["did"] for h in answer["hits"]] == [h.did for h in alone]
    searched = sum(float(v) for v in re.findall(r'^unirag_requests_total\{[^}]*endpoint="/v1/search"[^}]*status="200"'
                                                r'[^}]*\} (\S+)$', metrics, re.M))
    batched = float(re.search(r"^unirag_search_batch_size_sum (\S+)$", metrics, re.M).group(1))
    assert searched == batched == 24  # every search, whichever process answered it


def test_a_worker_that_cannot_start_stops_the_service_with_one_error_line(demo_index):
    """uvicorn starts a dead worker again: a bad generator spec would loop, a traceback each time. The first
    failing worker stops the service instead; ``unirag serve`` exits 2 with the reason."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "unirag", "serve", "--index", str(demo_index), "--workers", "2",
                           "--generator", "nosuch:thing", "--port", str(free_port())],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "error: unknown generator spec 'nosuch:thing'" in done.stderr
    assert "Traceback" not in done.stderr


def _healthz_process(url: str) -> int:
    """The process that answered /healthz on a new connection (whichever worker the kernel picks)."""
    with urllib.request.urlopen(url + "/healthz", timeout=30) as r:
        return json.loads(r.read())["process"]


def _both_listening(url: str) -> set[int]:
    """A worker listens once its model is loaded: /healthz answers as soon as the first one does."""
    import time

    seen, deadline = set(), time.monotonic() + 120
    while len(seen) < 2 and time.monotonic() < deadline:
        seen.add(_healthz_process(url))
    assert len(seen) == 2, "the second worker never answered"
    return seen


def _alive_after(pids: set[int], seconds: float) -> set[int]:
    """The processes of ``pids`` still running once ``seconds`` have passed (sooner if all are gone)."""
    import os
    import time

    alive, deadline = set(pids), time.monotonic() + seconds
    while alive and time.monotonic() < deadline:
        for pid in list(alive):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                alive.discard(pid)
        time.sleep(0.2)
    return alive


@pytest.mark.subprocess  # through serve_process
def test_a_burst_of_keep_alive_connections_is_spread_over_the_workers(demo_index, tmp_path):
    """uvicorn's workers shared one socket and asyncio accepts every waiting connection when it wakes, so
    one worker could take all 16 clients of a burst. Each worker now listens on a socket of its own
    (SO_REUSEPORT) and the kernel spreads connections by a hash of the client's port: with 16 connections
    and 2 workers, one worker getting fewer than 2 happens 17 times in 32,768."""
    import http.client

    with serve_process(demo_index, tmp_path, "--workers", "2") as url:
        _both_listening(url)
        port = int(url.rsplit(":", 1)[1])
        connections = [http.client.HTTPConnection("127.0.0.1", port, timeout=60) for _ in range(16)]
        for c in connections:
            c.connect()  # all 16 wait in the accept queue before any request is sent
        answered = []
        for c in connections:
            c.request("GET", "/healthz")
            answered.append(json.loads(c.getresponse().read())["process"])
            c.request("GET", "/healthz")  # the same connection stays with the same worker
            assert json.loads(c.getresponse().read())["process"] == answered[-1]
        for c in connections:
            c.close()
    counts = sorted(answered.count(p) for p in set(answered))
    assert len(counts) == 2 and counts[0] >= 2, counts


@pytest.mark.subprocess  # through serve_process
def test_a_worker_that_dies_is_replaced_and_none_outlives_the_service(demo_index, tmp_path):
    import os
    import signal
    import time

    with serve_process(demo_index, tmp_path, "--workers", "2") as url:
        first = _both_listening(url)
        victim = min(first)
        os.kill(victim, signal.SIGKILL)
        deadline, seen = time.monotonic() + 120, set()
        while not seen - first and time.monotonic() < deadline:
            try:
                seen.add(_healthz_process(url))
            except OSError:
                time.sleep(0.2)
        assert victim not in seen and seen - first, "no new worker answered after one was killed"
        workers = (first | seen) - {victim}
    assert not _alive_after(workers, 1.0)  # SIGTERM to unirag serve stops its workers too


@pytest.mark.subprocess  # through serve_process
@pytest.mark.parametrize("second", [["--workers", "2"], []], ids=["workers", "single"])
def test_a_second_service_on_a_port_in_use_is_refused_not_joined(demo_index, tmp_path, second):
    """Sockets with SO_REUSEPORT join any other such socket on the port: without a check, a second
    ``unirag serve --workers 2`` on the same port would silently share the first one's connections."""
    import subprocess
    import sys

    with serve_process(demo_index, tmp_path, "--workers", "2") as url:
        port = url.rsplit(":", 1)[1]
        done = subprocess.run([sys.executable, "-m", "unirag", "serve", "--index", str(demo_index),
                               "--port", port, *second], capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, done.stderr[-2000:]
        assert "Traceback" not in done.stderr
        assert re.search(rf"cannot listen on 127\.0\.0\.1:{port}|address already in use", done.stderr, re.I), done.stderr[-2000:]


@pytest.mark.subprocess
def test_workers_stop_when_the_service_is_killed_outright(demo_index, tmp_path):
    """SIGKILL leaves the parent no chance to stop its workers; they must not stay behind on the port."""
    import os
    import signal
    import subprocess
    import sys
    import time

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "unirag", "serve", "--index", str(demo_index), "--port", str(port),
                             "--workers", "2"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers: set[int] = set()
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 180
        while True:
            try:
                workers = _both_listening(url)
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, "the service never answered"
                time.sleep(0.3)
        proc.kill()
        proc.wait(10)
        workers = _alive_after(workers, 30)
        assert not workers, f"workers {workers} outlived their parent"
    finally:
        for pid in workers:
            os.kill(pid, signal.SIGKILL)
        proc.kill()
