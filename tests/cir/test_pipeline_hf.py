"""The image-side agents (A_c captions, A_v^q judgements) on a tiny random local HF VLM, end to end.

The random model's words are noise: its captions are kept (plain text), its judgements are not
JSON, so they are recorded as failures and scored 0 - the run still finishes with every ranking.
"""

from __future__ import annotations

import json

from xr_fixtures import CROSS_IMAGE, CROSS_TEXT, TEXT_TABLE, TableEncoder, make_world, responder

from fake_openai_server import FakeServer
from tiny_models import tiny_llava_dir
from unirag.cir.config import RoleConfig, XRConfig, XRSettings
from unirag.cir.pipeline import CirRun


def test_tiny_hf_vlm_agents_end_to_end(tmp_path):
    root = tmp_path / "images"
    ds = make_world(root)
    hf = RoleConfig(model=f"hf:{tiny_llava_dir()}", max_tokens=6)
    with FakeServer(responder=responder(root, malformed=False)) as srv:
        api = RoleConfig(model="openai:fake", options={"base_url": srv.url})
        cfg = XRConfig(roles={"caption": hf, "vision_question": hf, "text_imagination": api,
                              "vision_imagination": api, "question": api, "text_question": api},
                       settings=XRSettings(k_prime=2, k=5, json_attempts=1))
        lines = []
        metrics = CirRun(ds, tmp_path / "out", cfg, cache_dir=tmp_path / "cache",
                         encoder=TableEncoder(CROSS_TEXT, CROSS_IMAGE), text_encoder=TableEncoder(TEXT_TABLE),
                         progress=False, echo=lines.append).run()
    captions = [json.loads(x) for x in (tmp_path / "cache/calls/caption.jsonl").read_text().splitlines()]
    assert len(captions) == 6 and all(c["status"] == "ok" and isinstance(c["output"], str) for c in captions)
    judged = [json.loads(x) for x in (tmp_path / "cache/calls/vision_question.jsonl").read_text().splitlines()]
    assert len(judged) == 2 and all(j["status"] == "error" and "malformed reply" in j["error"] for j in judged)
    row = json.loads((tmp_path / "out/rankings.jsonl").read_text())
    assert sorted(row["ranked"]) == ["c1", "c2", "c3", "c4", "c5"]
    assert len(row["scores"]) == 2 and all(v["Sq_v"] == 0 for v in row["scores"].values())  # the top-k' (2)
    assert any("judgement call(s) failed" in n for n in row["notes"])
    assert metrics["xr"]["n_queries"] == 1
    manifest = json.loads((tmp_path / "out/manifest.json").read_text())
    assert manifest["agent_calls"]["caption"]["called"] == 6
