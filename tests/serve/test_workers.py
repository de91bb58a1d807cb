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
