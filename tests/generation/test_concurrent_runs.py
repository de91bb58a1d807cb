"""Two real ``unirag caption`` processes writing into one run directory at once: nothing lost or duplicated."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from fake_openai_server import FakeServer, Reply

REPO = Path(__file__).resolve().parents[2]


def test_two_caption_processes_share_one_out_folder(coco_set, no_api_keys, tmp_path):
    out = tmp_path / "run"
    rows = coco_set["rows"]
    by_hash = {hashlib.sha256((Path(coco_set["images_root"]) / r["image"]).read_bytes()).hexdigest()[:12]:
               f"q{r['image_id']}" for r in rows}

    def responder(req):
        # The caption names the query whose image was sent, so a record filed under the wrong qid shows.
        parts = [p for m in req.json["messages"] if isinstance(m["content"], list) for p in m["content"]]
        url = [p["image_url"]["url"] for p in parts if p["type"] == "image_url"][-1]
        digest = hashlib.sha256(base64.b64decode(url.split(",", 1)[1])).hexdigest()[:12]
        return Reply.chat(f"caption of {by_hash.get(digest, 'unknown')}")

    with FakeServer(responder=responder, latency=0.25) as srv:  # long enough for the two runs to overlap
        env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
        cmd = [sys.executable, "-m", "unirag", "caption", "--queries", str(coco_set["queries"]),
               "--images-root", str(coco_set["images_root"]), "--generator", "openai:gpt-4o",
               "--mode", "zero-shot", "--out", str(out), "--base-url", srv.url, "--no-progress",
               "--concurrency", "2"]
        procs = [subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(2)]
        results = [p.communicate(timeout=300) for p in procs]
        for p, (_, err) in zip(procs, results, strict=True):
            assert p.returncode == 0, err[-2000:]
        n_requests = len(srv.requests)
    lines = [json.loads(x) for x in (out / "outputs.jsonl").read_text().splitlines()]
    qids = [f"q{r['image_id']}" for r in rows]
    assert sorted(r["qid"] for r in lines) == sorted(qids)  # each query exactly once
    assert all(r["status"] == "ok" and r["caption"] == f"caption of {r['qid']}" for r in lines)
    # Each query is claimed before its call: one process calls it, the other waits for its record.
    assert n_requests == len(qids)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["counts"]["ok"] == len(qids)
