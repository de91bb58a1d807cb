"""``unirag cir`` with agents whose every call fails (a wrong key): exit 1 with one line, and the key the
provider echoed is in no file of the run or its cache (issue 29, point 2)."""

from __future__ import annotations

import json

from myntra_cir import build_colour_cir

from cli_capture import main_result
from fake_openai_server import FakeServer, Reply
from tiny_models import tiny_clip_dir

KEY = "sk-test-CIR-ECHOED-0123456789abcdef"


def _echo_key(request) -> Reply:
    sent = request.headers.get("authorization", "").removeprefix("Bearer ")
    return Reply.error(401, f"Incorrect API key provided: {sent}.")


def test_every_agent_call_failing_exits_1_and_leaves_no_key(myntra, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    q, pool = build_colour_cir(myntra / "products.jsonl", tmp_path / "set", n_queries=2, seed=1, pool_size=12)
    with FakeServer(responder=_echo_key) as srv:
        agents = tmp_path / "agents.yaml"
        agents.write_text(f"defaults: {{model: 'openai:fake', base_url: '{srv.url}'}}\n")
        code, out, err = main_result(
            ["cir", "--dataset", "mbeir", "--annotations", str(q), "--split-file", str(pool), "--images-root",
             str(myntra), "--out", str(tmp_path / "run"), "--encoder", str(tiny_clip_dir()), "--quiet",
             "--agents", str(agents), "--k-prime", "3"], capsys)
        assert srv.requests
    assert code == 1, err
    assert err.strip().splitlines()[-1].startswith("error: all ") and "agent calls of this run failed" in err
    leaked = [str(p) for p in (tmp_path / "run").rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]
    assert leaked == [] and KEY not in out + err
    calls = list((tmp_path / "run" / "cache" / "calls").glob("*.jsonl"))
    assert calls and "Incorrect API key provided: ***" in calls[0].read_text()
    # no imagination and no question: every stage falls back to the one before, down to the baseline
    rows = [json.loads(line) for line in (tmp_path / "run" / "rankings.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(r["stages"]["xr"] == r["stages"]["xr_coarse"] == r["stages"]["baseline"]
                                  and r["final_stage"] == "xr" and "question agent failed: coarse order kept"
                                  in r["notes"] for r in rows)
