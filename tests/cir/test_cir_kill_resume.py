"""Kill -9 a real ``unirag cir`` process mid-run, rerun it: no agent call is lost or repeated.

Agents answer from the local OpenAI-protocol server; the server itself kills the CLI process when
the 5th request arrives, so requests 1-4 are finished (and must be cached) and the 5th is in flight.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import signal
import subprocess
import sys

from myntra_cir import build_colour_cir

from fake_openai_server import FakeServer, Reply
from tiny_models import tiny_clip_dir

KILL_AT = 5


def _reply(req) -> Reply:
    msgs = req.json["messages"]
    first = msgs[0]["content"]
    prompt = (first if isinstance(first, str) else " ".join(p.get("text", "") for p in first)).strip()
    if prompt.startswith("Describe this image"):
        url = next(p["image_url"]["url"] for p in first if p["type"] == "image_url")
        return Reply.chat("a product " + hashlib.sha256(base64.b64decode(url.split(",", 1)[1])).hexdigest()[:6])
    if prompt.startswith("You write verification statements"):
        return Reply.chat(json.dumps({"statements": [{"statement": "It has the new colour", "answer": True}]}))
    if "Reference caption:" in prompt or "The image shown is the reference image" in prompt:
        key = "modifications" if "Reference caption:" in prompt else "attributes"
        value = [{"attribute": "colour", "present": True}] if key == "attributes" else ["new colour"]
        return Reply.chat(json.dumps({"target_caption": "a product in the new colour", key: value}))
    n = len(re.findall(r"^\d+\. ", prompt, flags=re.M))
    return Reply.chat(json.dumps({"answers": [True] * n}))


def test_kill_and_rerun_repeats_no_finished_call(myntra, tmp_path):
    q, pool = build_colour_cir(myntra / "products.jsonl", tmp_path / "set", n_queries=2, seed=3, pool_size=10)
    proc_box = {}

    def responder(req):
        if len(server.requests) == KILL_AT and "proc" in proc_box:
            os.kill(proc_box.pop("proc").pid, signal.SIGKILL)
        return _reply(req)

    with FakeServer(responder=responder) as server:
        cfg = tmp_path / "agents.yaml"
        cfg.write_text(f"defaults: {{model: 'openai:fake-vlm', base_url: '{server.url}'}}\n"
                       f"encoder: '{tiny_clip_dir()}'\nsettings: {{k_prime: 3, concurrency: 1}}\n")
        cmd = [sys.executable, "-m", "unirag", "cir", "--dataset", "mbeir", "--annotations", str(q),
               "--split-file", str(pool), "--images-root", str(myntra), "--out", str(tmp_path / "run"),
               "--agents", str(cfg), "--quiet"]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        proc_box["proc"] = proc
        proc.communicate(timeout=300)
        assert proc.returncode == -signal.SIGKILL
        assert len(server.requests) == KILL_AT
        cached = (tmp_path / "run/cache/calls/caption.jsonl").read_text().splitlines()
        assert len(cached) == KILL_AT - 1  # every finished call was on disk before the kill
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        # identical calls (same caption + statements for two queries) are made once, so count the cache
        stored = sum(len(f.read_text().splitlines()) for f in (tmp_path / "run/cache/calls").glob("*.jsonl"))
        assert stored >= 12 + 4 + 2  # 12 captions (10 pool + 2 references), 4 imaginations, 2 questions
        assert len(server.requests) == stored + 1  # only the call in flight at the kill was asked again
        assert "\"status\": \"error\"" not in "".join(f.read_text() for f in (tmp_path / "run/cache/calls").glob("*.jsonl"))
    metrics = json.loads((tmp_path / "run/metrics.json").read_text())
    assert {"baseline", "xr_coarse", "xr"} <= set(metrics) and metrics["xr"]["n_queries"] == 2
    rows = [json.loads(x) for x in (tmp_path / "run/rankings.jsonl").read_text().splitlines()]
    assert all(len(r["scores"]) == 3 and r["final_stage"] == "xr" for r in rows)
