"""The full X^R agent flow against scripted agents on a local OpenAI-protocol server.

Hand computation (vectors in xr_fixtures.py; C_t = "ct", C_v = "cv"):

  cand  s_t^t s_t^v | s_v^t s_v^v |  S^t = s_t^t+s_v^t   S^v = s_t^v+s_v^v
  c1    0.6   0.8   | 0.8   0.6   |  1.40                1.40
  c2    1.0   0     | 0     0.8   |  1.00                0.80
  c3    0     0     | 0     0     |  0                   0
  c4    0.8   0.6   | 0.28  0     |  1.08                0.60
  c5    0     1.0   | 0.6   0.8   |  0.60                1.80

  rank(S^t): c1 1, c4 2, c2 3, c5 4, c3 5      rank(S^v): c5 1, c1 2, c2 3, c4 4, c3 5
  RRF (k=60): c1 1/61+1/62 = .032522, c5 1/64+1/61 = .032018, c4 1/62+1/64 = .031754,
              c2 2/63 = .031746, c3 2/65 = .030769   -> coarse order c1 c5 c4 c2 c3; top-k'(3) = c1 c5 c4
  statements: "red" (true), "sleeves" (false)
  S_q^t (captions): cap1 [T,T] -> 1, cap5 [T,F] -> 2, cap4 [F,F] -> 1
  S_q^v (images):   c1 [F,T] -> 0,   c5 [T,F] -> 2,   c4 [T,F] -> 2
  norm S^t over top-3 {1.4, .6, 1.08} -> c1 1, c5 0, c4 .6; norm S^v {1.4, 1.8, .6} -> c1 2/3, c5 1, c4 0
  lambda .5: c1 1*(.5+.3333) = .8333, c5 4*(0+.5) = 2.0, c4 3*(.3+0) = .9  -> final c5 c4 c1 c2 c3
  baseline: fused(ref (0,0,1), "make it red" (0,0,1)) = (0,0,1) -> c3 1, c4 .96, c2 .6, c1 0, c5 0
"""

from __future__ import annotations

import json

import pytest
from xr_fixtures import CROSS_IMAGE, CROSS_TEXT, TEXT_TABLE, TableEncoder, make_world, responder

from fake_openai_server import FakeServer
from unirag.cir.config import RoleConfig, XRConfig, XRSettings
from unirag.cir.pipeline import Ablation
from unirag.cir.xr import XR

# unique calls: 6 captions, 1 + 1 imagination, 1 question, 3 + 3 judgements
UNIQUE_CALLS = 15
# + 1 re-ask of the vision imagination (no JSON) + 1 re-ask of the c1 vision judgement (1 answer of 2)
FIRST_RUN_REQUESTS = UNIQUE_CALLS + 2


def _config(url: str, **settings) -> XRConfig:
    roles = {r: RoleConfig(model="openai:fake-vlm", options={"base_url": url})
             for r in ("caption", "text_imagination", "vision_imagination", "question", "text_question",
                       "vision_question")}
    return XRConfig(roles=roles, settings=XRSettings(**{"k_prime": 3, "k": 5, "lam": 0.5, **settings}))


def _run(tmp_path, url, out="out", ablation=None, **settings):
    ds = make_world(tmp_path / "images")
    run = XR(_config(url, **settings), ablation=ablation, cache_dir=tmp_path / "cache",
                 encoder=TableEncoder(CROSS_TEXT, CROSS_IMAGE, "cross"), text_encoder=TableEncoder(TEXT_TABLE),
                 progress=False, echo=lambda s: None)
    metrics = run.run(ds, tmp_path / out)
    rows = [json.loads(line) for line in (tmp_path / out / "rankings.jsonl").read_text().splitlines()]
    return metrics, rows[0]


@pytest.fixture()
def server(tmp_path):
    make_world(tmp_path / "images")
    with FakeServer(responder=responder(tmp_path / "images")) as srv:
        yield srv


def test_scores_and_order_match_hand_computation(tmp_path, server):
    metrics, row = _run(tmp_path, server.url)
    assert row["stages"]["baseline"] == ["c3", "c4", "c2", "c1", "c5"]
    assert row["stages"]["xr_coarse"] == ["c1", "c5", "c4", "c2", "c3"]
    assert row["stages"]["xr"] == ["c5", "c4", "c1", "c2", "c3"]
    assert row["ranked"] == ["c5", "c4", "c1", "c2", "c3"] and row["final_stage"] == "xr"
    sc = row["scores"]
    assert set(sc) == {"c1", "c5", "c4"}  # only the top-k' are re-ranked
    assert (sc["c1"]["S_t"], sc["c1"]["S_v"]) == pytest.approx((1.4, 1.4), abs=1e-6)
    assert (sc["c4"]["S_t"], sc["c4"]["S_v"]) == pytest.approx((1.08, 0.6), abs=1e-6)
    assert sc["c1"]["rrf"] == pytest.approx(1 / 61 + 1 / 62)
    assert sc["c5"]["rrf"] == pytest.approx(1 / 64 + 1 / 61)
    assert [(sc[c]["Sq_t"], sc[c]["Sq_v"]) for c in ("c1", "c5", "c4")] == [(1, 0), (2, 2), (1, 2)]
    assert sc["c1"]["final"] == pytest.approx(1 * (0.5 * 1 + 0.5 * (0.8 / 1.2)), abs=1e-6)
    assert sc["c5"]["final"] == pytest.approx(2.0, abs=1e-6)
    assert sc["c4"]["final"] == pytest.approx(3 * 0.5 * (0.48 / 0.8), abs=1e-6)
    assert row["imagination"]["text"]["modifications"] == ["colour: grey -> red"]
    assert row["statements"][0] == {"statement": "The dress is red", "answer": True}
    # target c5: baseline rank 5, coarse rank 2, X^R rank 1
    assert metrics["baseline"]["R@1"] == 0 and metrics["baseline"]["R@5"] == 100
    assert metrics["xr_coarse"]["R@1"] == 0 and metrics["xr"]["R@1"] == 100
    assert len(server.requests) == FIRST_RUN_REQUESTS
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["agent_calls"]["vision_question"] == {"requested": 3, "called": 3, "cached": 0, "failed": 0}


def test_rerun_repeats_no_call_and_lambda_changes_order(tmp_path, server):
    _run(tmp_path, server.url)
    n = len(server.requests)
    # lambda = 1: only norm(S^t) counts -> c1 1*1 = 1, c5 4*0 = 0, c4 3*.6 = 1.8 -> c4 c1 c5
    _, row = _run(tmp_path, server.url, out="out2", lam=1.0)
    assert len(server.requests) == n  # every agent call came from the cache
    assert row["ranked"][:3] == ["c4", "c1", "c5"]


def test_interrupted_run_resumes_without_repeating_calls(tmp_path, server):
    from unirag.generators.registry import load_generator

    calls = {"n": 0}

    class Interrupting:
        def __init__(self, inner):
            self.inner = inner

        def generate(self, messages, options=None):
            calls["n"] += 1
            if calls["n"] == 10:  # after the captions and both imaginations (one re-asked): Ctrl-C
                raise KeyboardInterrupt
            return self.inner.generate(messages, options)

    ds = make_world(tmp_path / "images")
    run = XR(_config(server.url), cache_dir=tmp_path / "cache",
                 encoder=TableEncoder(CROSS_TEXT, CROSS_IMAGE, "cross"), text_encoder=TableEncoder(TEXT_TABLE),
                 generator_factory=lambda spec, **o: Interrupting(load_generator(spec, **o)),
                 progress=False, echo=lambda s: None)
    with pytest.raises(KeyboardInterrupt):
        run.run(ds, tmp_path / "out")
    assert len(server.requests) == 9
    _, row = _run(tmp_path, server.url)
    assert len(server.requests) == FIRST_RUN_REQUESTS  # nothing asked twice
    assert row["ranked"] == ["c5", "c4", "c1", "c2", "c3"]


def test_failed_calls_are_recorded_and_retried_on_rerun(tmp_path, tmp_path_factory):
    root = tmp_path / "images"
    make_world(root)
    good = responder(root, malformed=False)

    def failing(req):
        if "Look at the image" in str(req.json["messages"][0]["content"]):
            return __import__("fake_openai_server").Reply.error(400, "bad request")
        return good(req)

    with FakeServer(responder=failing) as srv:
        metrics, row = _run(tmp_path, srv.url)
    assert any("judgement call(s) failed" in n for n in row["notes"])
    assert set(row["scores"]) == {"c1", "c5", "c4"}  # the coarse top-3 is still re-ranked ...
    assert all(v["Sq_v"] == 0 for v in row["scores"].values())  # ... with failed judgements scored 0
    store = (tmp_path / "cache" / "calls" / "vision_question.jsonl").read_text()
    assert store.count('"status": "error"') == 3 and "bad request" in store
    with FakeServer(responder=good) as srv:
        _, row = _run(tmp_path, srv.url)
        assert len(srv.requests) == 3  # only the three failed judgements
    assert row["ranked"] == ["c5", "c4", "c1", "c2", "c3"]


def test_ablations(tmp_path, server):
    # coarse only: fine stage switched off
    ds = make_world(tmp_path / "images")
    run = XR(_config(server.url), stages=("baseline", "coarse"),
                 cache_dir=tmp_path / "cache", encoder=TableEncoder(CROSS_TEXT, CROSS_IMAGE, "cross"),
                 text_encoder=TableEncoder(TEXT_TABLE), progress=False, echo=lambda s: None)
    m = run.run(ds, tmp_path / "co")
    assert "xr" not in m and m["final_stage"] == "xr_coarse"
    # vision only: S^t = s_v^t, S^v = s_v^v -> c1 (.8,.6) c2 (0,.8) c3 (0,0) c4 (.28,0) c5 (.6,.8)
    # ranks t: c1 1, c5 2, c4 3, c2 4, c3 5; v: c2 1, c5 2, c1 3, c3 4, c4 5 (ties by index)
    # rrf: c1 1/61+1/63 = .032266, c5 2/62 = .032258, c2 1/64+1/61 = .032018, c4 1/63+1/65 = .031258,
    #      c3 1/65+1/64 = .031010 -> c1 c5 c2 c4 c3
    _, row = _run(tmp_path, server.url, out="vis", ablation=Ablation(modalities="vision"))
    assert row["stages"]["xr_coarse"] == ["c1", "c5", "c2", "c4", "c3"]
    assert set(row["scores"]) == {"c1", "c5", "c2"} and all(v["Sq_t"] == 0 for v in row["scores"].values())
    # no imagination: coarse = baseline order; fine re-ranks baseline top-3 c3 c4 c2
    # S^t = S^v = baseline sims (1, .96, .6) -> norm (1, .9, 0); S_q: c3 0+1, c4 1+2, c2 2+2
    # final: c3 1*1 = 1, c4 3*.9 = 2.7, c2 4*0 = 0 -> c4 c3 c2
    _, row = _run(tmp_path, server.url, out="noimag", ablation=Ablation(imagination=False))
    assert row["stages"]["xr_coarse"] == row["stages"]["baseline"]
    assert row["ranked"][:3] == ["c4", "c3", "c2"]
    # fine only: question scores alone on the baseline top-3 -> c2 4, c4 3, c3 1
    _, row = _run(tmp_path, server.url, out="fineonly", ablation=Ablation(fine_only=True))
    assert row["ranked"][:3] == ["c2", "c4", "c3"] and "xr_coarse" not in row["stages"]


def test_cirr_protocol_excludes_reference_and_scores_subset(tmp_path):
    """Baseline only. Reference c3 (its image (0,0,1)) + "make it red" (0,0,1) -> fused (0,0,1).

    Gallery without c3: c4 .96, c2 .6, c1 0, c5 0 -> c4 c2 c1 c5. img_set {c3, c1, c5, c2} minus the
    reference -> c2 c1 c5; target c5 is 3rd: R_subset@1 = @2 = 0, @3 = 100; R@1 = 0, R@5 = 100.
    """
    from unirag.cir.datasets import CirQuery

    ds = make_world(tmp_path / "images")
    ds.kind, ds.exclude_reference = "cirr", True
    ds.queries = [CirQuery("7", "c3", "make it red", targets=["c5"], subset=["c3", "c1", "c5", "c2"])]
    lines = []
    run = XR(XRConfig(), work_dir=tmp_path / "out", encoder=TableEncoder(CROSS_TEXT, CROSS_IMAGE, "cross"),
                 progress=False, echo=lines.append)
    m = run.run(ds, tmp_path / "out")
    row = json.loads((tmp_path / "out/rankings.jsonl").read_text())
    assert row["ranked"] == ["c4", "c2", "c1", "c5"]
    assert row["subset_ranked"]["baseline"] == ["c2", "c1", "c5"]
    b = m["baseline"]
    assert (b["R@1"], b["R@5"], b["R_subset@1"], b["R_subset@2"], b["R_subset@3"]) == (0, 100, 0, 0, 100)
    assert b["avg(R@5,R_subset@1)"] == 50
    assert sum("no agent models configured" in x for x in lines) == 1
    assert "submission files skipped" in " ".join(m.get("notes", []) + json.loads(
        (tmp_path / "out/manifest.json").read_text())["notes"])


def test_missing_roles_are_named_before_any_call(tmp_path):
    from unirag.errors import ConfigError

    ds = make_world(tmp_path / "images")
    cfg = XRConfig(roles={"caption": RoleConfig(model="openai:x", options={"base_url": "http://127.0.0.1:9/v1"})})
    run = XR(cfg, work_dir=tmp_path / "out", encoder=TableEncoder(CROSS_TEXT, CROSS_IMAGE, "cross"),
                 text_encoder=TableEncoder(TEXT_TABLE), progress=False, echo=lambda s: None)
    with pytest.raises(ConfigError, match="text_imagination, vision_imagination, question"):
        run.run(ds, tmp_path / "out")
    assert not (tmp_path / "out/cache/calls/caption.jsonl").exists()
