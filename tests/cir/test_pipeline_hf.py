"""The image-side agents (A_c captions, A_v^q judgements) on a tiny random local HF VLM, end to end.

The captioner is a tiny random VLM that says only letters (its captions are kept as plain text); the
judge is a tiny random VLM whose generation config makes it answer one fixed JSON reply, so the run
shows the local model's judgements parsed and scored.
"""

from __future__ import annotations

import json

import pytest
from xr_fixtures import CROSS_IMAGE, CROSS_TEXT, TEXT_TABLE, TableEncoder, make_world, responder

from fake_openai_server import FakeServer, Reply
from tiny_models import tiny_llava_dir
from unirag.cir.config import RoleConfig, XRConfig, XRSettings
from unirag.cir.xr import XR

JUDGE_REPLY = 'reply:{"answers": [true, true]}'


def _api_side(root):
    """The table's replies for the API agents; the text agents' prompts carry the local captioner's letters
    instead of the table's captions, so those get fixed answers: imagination -> C_t = "ct", every
    statement judged false on a caption."""
    base = responder(root, malformed=False)

    def reply(req):
        content = req.json["messages"][0]["content"]
        prompt = (content if isinstance(content, str) else " ".join(p.get("text", "") for p in content)).strip()
        if prompt.startswith("Here is the caption of an image"):
            return Reply.chat(json.dumps({"answers": [False, False]}))
        if "Reference caption:" in prompt:
            return Reply.chat(json.dumps({"target_caption": "ct", "modifications": ["colour: grey -> red"]}))
        return base(req)

    return reply


@pytest.mark.slow  # tens of seconds on 2 cores: left out of make test-fast
def test_tiny_hf_vlm_agents_end_to_end(tmp_path):
    root = tmp_path / "images"
    ds = make_world(root)
    captioner = RoleConfig(model=f"hf:{tiny_llava_dir()}", max_tokens=6)
    judge = RoleConfig(model=f"hf:{tiny_llava_dir(emits=JUDGE_REPLY)}", max_tokens=40)
    with FakeServer(responder=_api_side(root)) as srv:
        api = RoleConfig(model="openai:fake", options={"base_url": srv.url})
        cfg = XRConfig(roles={"caption": captioner, "vision_question": judge, "text_imagination": api,
                              "vision_imagination": api, "question": api, "text_question": api},
                       settings=XRSettings(k_prime=2, k=5, json_attempts=1))
        metrics = XR(cfg, cache_dir=tmp_path / "cache",
                         encoder=TableEncoder(CROSS_TEXT, CROSS_IMAGE), text_encoder=TableEncoder(TEXT_TABLE),
                         progress=False, echo=lambda _: None).run(ds, tmp_path / "out")
    # A_c on the local VLM: 5 candidates + the reference, each 6 letters (6 new tokens)
    captions = [json.loads(x) for x in (tmp_path / "cache/calls/caption.jsonl").read_text().splitlines()]
    assert len(captions) == 6
    assert all(c["status"] == "ok" and len(c["output"]) == 6 and c["output"].isalpha() for c in captions)
    # A_v^q on the local VLM: its JSON reply parsed for both top-k' candidates
    judged = [json.loads(x) for x in (tmp_path / "cache/calls/vision_question.jsonl").read_text().splitlines()]
    assert len(judged) == 2 and all(j["status"] == "ok" and j["output"] == {"answers": [True, True]} for j in judged)
    row = json.loads((tmp_path / "out/rankings.jsonl").read_text())
    assert sorted(row["ranked"]) == ["c1", "c2", "c3", "c4", "c5"]
    # expected answers [true, false]: the judge's [true, true] scores 1, the text judge's [false, false] 1
    assert len(row["scores"]) == 2 and all(v["Sq_v"] == 1 and v["Sq_t"] == 1 for v in row["scores"].values())
    assert not row.get("notes")  # no failed call, no fallback
    assert metrics["xr"]["n_queries"] == 1
    manifest = json.loads((tmp_path / "out/manifest.json").read_text())
    assert manifest["agent_calls"]["caption"]["called"] == 6
    assert manifest["agent_calls"]["vision_question"]["called"] == 2
