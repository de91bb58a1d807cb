"""Two real ``unirag cir`` processes sharing one ``--cache-dir`` at once: every call stored once, none lost."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from myntra_cir import build_colour_cir
from test_cir_kill_resume import _reply

from fake_openai_server import FakeServer
from tiny_models import tiny_clip_dir


def test_two_cir_processes_share_one_cache_dir(myntra, tmp_path):
    q, pool = build_colour_cir(myntra / "products.jsonl", tmp_path / "set", n_queries=2, seed=3, pool_size=10)
    cache = tmp_path / "shared-cache"
    with FakeServer(responder=_reply, latency=0.02) as server:
        cfg = tmp_path / "agents.yaml"
        cfg.write_text(f"defaults: {{model: 'openai:fake-vlm', base_url: '{server.url}'}}\n"
                       f"encoder: '{tiny_clip_dir()}'\nsettings: {{k_prime: 3, concurrency: 2}}\n")
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        procs = []
        for name in ("run-a", "run-b"):
            cmd = [sys.executable, "-m", "unirag", "cir", "--dataset", "mbeir", "--annotations", str(q),
                   "--split-file", str(pool), "--images-root", str(myntra), "--out", str(tmp_path / name),
                   "--agents", str(cfg), "--cache-dir", str(cache), "--quiet"]
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        for p in procs:
            _, err = p.communicate(timeout=300)
            assert p.returncode == 0, err[-2000:]
        n_requests = len(server.requests)
    stored = 0
    for f in (cache / "calls").glob("*.jsonl"):
        recs = [json.loads(x) for x in f.read_text().splitlines()]
        keys = [r["key"] for r in recs]
        assert len(keys) == len(set(keys)), f"{f.name} stores a call twice"
        assert all(r["status"] == "ok" for r in recs)
        stored += len(recs)
    assert stored >= 12 + 4 + 2  # 12 captions (10 pool + 2 references), 4 imaginations, 2 questions, judgements
    assert n_requests == stored  # each call claimed before it is made: one process makes it, the other waits
    ranks = [(tmp_path / n / "rankings.jsonl").read_text() for n in ("run-a", "run-b")]
    assert ranks[0] == ranks[1] and len(ranks[0].splitlines()) == 2
    # A third run over the same cache makes no call at all.
    with FakeServer(responder=_reply) as again:
        cfg.write_text(f"defaults: {{model: 'openai:fake-vlm', base_url: '{again.url}'}}\n"
                       f"encoder: '{tiny_clip_dir()}'\nsettings: {{k_prime: 3, concurrency: 2}}\n")
        done = subprocess.run([sys.executable, "-m", "unirag", "cir", "--dataset", "mbeir", "--annotations", str(q),
                               "--split-file", str(pool), "--images-root", str(myntra), "--out", str(tmp_path / "c"),
                               "--agents", str(cfg), "--cache-dir", str(cache), "--quiet"],
                              env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        assert len(again.requests) == 0
