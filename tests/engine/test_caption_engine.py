"""Caption runs on Ray (``--engine ray``): the same records as a local run, one call per query, and a
run that survives its driver being killed (a real ``unirag caption`` process, SIGKILL mid-run) or one
of its workers dying."""

from __future__ import annotations

import json
import signal
import subprocess
from collections import Counter
from pathlib import Path

from tests_engine_helpers import caption_cmd, wait_for_records

from engine_plugins import image_digest
from ray_cluster import wait_until_idle
from unirag.pipelines.caption import CaptionConfig, run_captioning
from unirag.runs.engine import EngineOptions

GENERATOR = "python:engine_plugins:make_captioner"


def _cfg(data: dict, out: Path, engine) -> CaptionConfig:
    return CaptionConfig(queries=data["queries"], generator=GENERATOR, out=out, mode="rag", k=2,
                         images_root=data["images_root"], retrieval=data["run"], engine=engine, progress=False)


def _digest_to_qid(data: dict) -> dict[str, str]:
    return {image_digest(Path(data["images_root"]) / r["image"]): f"q{r['image_id']}" for r in data["rows"]}


def test_ray_run_stores_the_records_of_a_local_run(coco_caption_set, ray_cluster, tmp_path, monkeypatch):
    from tests_engine_helpers import read_records

    address, _ = ray_cluster
    local = run_captioning(_cfg(coco_caption_set, tmp_path / "local", "local"))
    calls = tmp_path / "calls.log"
    monkeypatch.setenv("UNIRAG_TEST_CALLS", str(calls))
    ray = run_captioning(_cfg(coco_caption_set, tmp_path / "ray",
                              EngineOptions(engine="ray", workers=2, ray_address=address)))
    n = coco_caption_set["n"]
    assert local["counts"]["ok"] == ray["counts"]["ok"] == n
    assert ray["this_run"] == {"ok": n, "error": 0, "skipped": 0}
    a, b = read_records(tmp_path / "local"), read_records(tmp_path / "ray")
    assert a == b and all(len(r["examples"]) == 2 for r in a)
    # every query was called once, on the workers (the driver never loaded the model)
    assert sorted(Counter(calls.read_text().split()).values()) == [1] * n
    ma, mb = (json.loads((tmp_path / d / "manifest.json").read_text()) for d in ("local", "ray"))
    assert ma["identity"] == mb["identity"] and mb["settings"]["engine"]["engine"] == "ray"
    assert mb["settings"]["engine"]["workers"] == 2 and ma["settings"]["engine"]["engine"] == "local"
    # same prompts saved for inspection, the wire form (NNN_qid.sent.txt) rendered by a worker's model
    assert sorted(p.name for p in (tmp_path / "ray/prompts").iterdir()) == \
        sorted(p.name for p in (tmp_path / "local/prompts").iterdir())
    sent = sorted((tmp_path / "local/prompts").glob("*.sent.txt"))
    assert sent and all(p.read_text().startswith("echo-captioner wire form, 3 images") for p in sent)
    assert [(tmp_path / "ray/prompts" / p.name).read_text() for p in sent] == [p.read_text() for p in sent]


def test_ray_workers_decode_each_call_s_images_ahead_of_the_model(coco_caption_set, ray_cluster, tmp_path,
                                                                  monkeypatch):
    """With ``decode_workers=1`` each Ray worker's decode process decodes the images of a call while the
    model works on the call before: every image the model's calls carry was decoded ahead (the call
    is given them decoded), the records are a local run's, and the manifest's
    engine entry records the setting."""
    from tests_engine_helpers import read_records

    address, _ = ray_cluster
    run_captioning(_cfg(coco_caption_set, tmp_path / "local", "local"))
    ahead = tmp_path / "ahead.log"
    monkeypatch.setenv("UNIRAG_TEST_AHEAD", str(ahead))
    result = run_captioning(_cfg(coco_caption_set, tmp_path / "ray",
                                 EngineOptions(engine="ray", workers=2, ray_address=address, decode_workers=1)))
    n = coco_caption_set["n"]
    assert result["this_run"] == {"ok": n, "error": 0, "skipped": 0}
    assert read_records(tmp_path / "ray") == read_records(tmp_path / "local")
    assert Counter(ahead.read_text().split()) == {"ahead": n * 3}  # each query's image and its 2 examples'
    manifest = json.loads((tmp_path / "ray" / "manifest.json").read_text())
    assert manifest["settings"]["engine"]["decode_workers"] == 1


def test_driver_killed_then_rerun_calls_no_finished_query_again(coco_caption_set, ray_cluster, tmp_path):
    from tests_engine_helpers import read_records

    address, env = ray_cluster
    calls = tmp_path / "calls.log"
    env = {**env, "UNIRAG_TEST_CALLS": str(calls), "UNIRAG_TEST_DELAY": "0.4"}
    out = tmp_path / "ray"
    cmd = caption_cmd(coco_caption_set, out, GENERATOR) + ["--engine", "ray", "--workers", "2",
                                                           "--ray-address", address]
    first = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stored = wait_for_records(out / "outputs.jsonl", 4, first)
    first.send_signal(signal.SIGKILL)
    first.wait()
    wait_until_idle(address, env)  # the killed driver's workers released
    stored = {json.loads(x)["qid"] for x in (out / "outputs.jsonl").read_text().splitlines() if x.endswith("}")}
    n = coco_caption_set["n"]
    assert 4 <= len(stored) < n
    calls_before = Counter(calls.read_text().split())
    second = subprocess.run(cmd, env={**env, "UNIRAG_TEST_DELAY": "0"}, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr[-3000:]
    to_qid = _digest_to_qid(coco_caption_set)
    calls_after = Counter(calls.read_text().split()) - calls_before
    again = {to_qid[d] for d in calls_after if calls_before[d]}
    assert not again & stored, "a query finished before the kill was called again"
    assert len(again) <= 2 * 2 * 2  # at most the batches in flight at the kill (2 workers x 2 batches of 2)
    assert sum(calls_after.values()) == n - len(stored)
    # the resumed run equals a local run from scratch
    subprocess.run(caption_cmd(coco_caption_set, tmp_path / "local", GENERATOR), env=env, check=True,
                   capture_output=True, timeout=300)
    assert read_records(out) == read_records(tmp_path / "local")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["resumed"] is True


def test_a_dead_worker_s_items_are_taken_over(coco_caption_set, ray_cluster, tmp_path, monkeypatch):
    """The first worker to reach its 3rd call exits on the spot (as the OOM killer would end it): the
    other finishes every query, the dead worker's claimed items included, and the run is complete."""
    from tests_engine_helpers import read_records

    address, _ = ray_cluster
    marker = tmp_path / "died"
    monkeypatch.setenv("UNIRAG_TEST_DIE_MARKER", str(marker))
    monkeypatch.setenv("UNIRAG_TEST_DIE_AT", "3")
    result = run_captioning(_cfg(coco_caption_set, tmp_path / "ray",
                                 EngineOptions(engine="ray", workers=2, ray_address=address)))
    assert marker.exists(), "no worker died: the test did not test anything"
    assert result["counts"]["ok"] == coco_caption_set["n"] and result["counts"]["error"] == 0
    monkeypatch.delenv("UNIRAG_TEST_DIE_MARKER")
    run_captioning(_cfg(coco_caption_set, tmp_path / "local", "local"))
    assert read_records(tmp_path / "ray") == read_records(tmp_path / "local")
