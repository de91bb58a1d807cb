"""``unirag cir --engine ray`` with a local agent model (``python:``) for every X^R role, pool
captioning included: the same rankings and agent calls as a local run, and a driver killed mid-run
resumes without repeating a stored call."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

from tests_engine_helpers import UNIRAG, wait_for_records

from ray_cluster import wait_until_idle

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from myntra_cir import build_colour_cir  # noqa: E402

AGENT = "python:engine_plugins:make_agent"


def _setup(myntra: Path, tmp_path: Path) -> tuple[list[str], Path]:
    from tiny_models import tiny_clip_dir

    q, pool = build_colour_cir(myntra / "products.jsonl", tmp_path / "set", n_queries=2, seed=3, pool_size=10)
    cfg = tmp_path / "agents.yaml"
    cfg.write_text(f"defaults: {{model: '{AGENT}'}}\nencoder: '{tiny_clip_dir()}'\nsettings: {{k_prime: 3}}\n")
    base = UNIRAG + ["cir", "--dataset", "mbeir", "--annotations", str(q), "--split-file", str(pool),
                     "--images-root", str(myntra), "--agents", str(cfg), "--quiet"]
    return base, tmp_path


def _rankings(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "rankings.jsonl").read_text().splitlines()]


def _stored_calls(out: Path) -> dict[str, list[str]]:
    """role -> the calls (the agent's #tag in each stored reply) in its cache store."""
    found = {}
    for f in sorted((out / "cache/calls").glob("*.jsonl")):
        lines = [json.loads(x) for x in f.read_text().splitlines() if x.endswith("}")]
        found[f.stem] = sorted(re.search(r"#([0-9a-f]{12})", r["raw"])[1] for r in lines if r.get("status") == "ok")
    return found


def test_ray_agents_rank_as_local_agents_and_resume_after_a_kill(myntra, ray_cluster, tmp_path):
    """Also: with ``--decode-workers 1`` every image an agent call sends was decoded ahead by the Ray
    worker's decode process (its image parts came with the decoded images)."""
    address, env = ray_cluster
    base, _ = _setup(myntra, tmp_path)
    calls = tmp_path / "calls.log"
    env = {**env, "UNIRAG_TEST_CALLS": str(calls), "OMP_NUM_THREADS": "1"}
    local = subprocess.run(base + ["--out", str(tmp_path / "local")], env={**env, "UNIRAG_TEST_CALLS": ""},
                           capture_output=True, text=True, timeout=400)
    assert local.returncode == 0, local.stderr[-3000:]

    ray_cmd = base + ["--out", str(tmp_path / "ray"), "--engine", "ray", "--workers", "2", "--ray-address", address,
                      "--decode-workers", "1"]
    ahead = tmp_path / "ahead.log"
    env = {**env, "UNIRAG_TEST_AHEAD": str(ahead)}
    first = subprocess.Popen(ray_cmd, env={**env, "UNIRAG_TEST_DELAY": "0.4"}, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
    wait_for_records(tmp_path / "ray/cache/calls/caption.jsonl", 4, first)
    first.send_signal(signal.SIGKILL)
    first.wait()
    wait_until_idle(address, env)  # the killed driver's workers released
    stored_before = {k for keys in _stored_calls(tmp_path / "ray").values() for k in keys}
    started_before = Counter(calls.read_text().split())
    assert 4 <= len(stored_before) < 12  # 10 pool captions + 2 references come first

    second = subprocess.run(ray_cmd, env=env, capture_output=True, text=True, timeout=400)
    assert second.returncode == 0, second.stderr[-3000:]
    again = Counter(calls.read_text().split()) - started_before
    assert not set(again) & stored_before, "a call stored before the kill was made again"
    assert sum(1 for k in again if started_before[k]) <= 2 * 2  # only calls in flight (2 workers x 2)

    assert _rankings(tmp_path / "ray") == _rankings(tmp_path / "local")
    assert _stored_calls(tmp_path / "ray") == _stored_calls(tmp_path / "local")
    rows = _rankings(tmp_path / "ray")
    assert all(r["final_stage"] == "xr" and len(r["scores"]) == 3 for r in rows)
    manifest = json.loads((tmp_path / "ray/manifest.json").read_text())
    assert manifest["agent_calls"]["caption"]["called"] > 0
    seen = Counter(ahead.read_text().split())
    assert set(seen) == {"ahead"} and seen["ahead"] >= 12  # 10 pool captions + 2 references, at least
