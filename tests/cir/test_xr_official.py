"""X^R under the ``official`` profile: each behaviour of the official code (01yzzyu/xr.github.io, XR/,
commit cf44a37), pinned on hand-computed inputs. Cites name the official file and line(s) at cf44a37.

Hand computation of the 5-candidate world (vectors in xr_fixtures.py; descriptions "ct", "cv"; tau 0.15):

  d_ct(c) = .85 <ct, image> + .15 <ct, caption>      d_cv(c) = .85 <cv, image> + .15 <cv, caption>
  c1  .85*.8  + .15*.6 = .77                          .85*.6 + .15*.8 = .63      aug .700
  c2  .85*0   + .15*1  = .15                          .85*.8 + .15*0  = .68      aug .415
  c3  0                                               0                          aug 0
  c4  .85*.28 + .15*.8 = .358                         .85*0  + .15*.6 = .09      aug .224
  c5  .85*.6  + .15*0  = .51                          .85*.8 + .15*1  = .83      aug .670
  aug order c1 c5 c2 c4 c3 (the xr_coarse ranking; top-k' = 3: c1 c5 c2)
  RRF of the two lists (computed, unused): c5 1/62+1/61, c1 1/61+1/63, c2 1/64+1/62, ... -> c5 first

  statements: "The dress is red" (true), "The dress has sleeves" (false); one yes/no call each
  S_q^v (images, expected T,F):             c1 [F,T] -> 0,  c5 [T,F] -> 2,  c2 [T,F] -> 2
  S_q^t (captions, bug: expected T,T):      cap1 [T,T] -> 2, cap5 [T,F] -> 1, cap2 [T,F] -> 1
  min-max(aug) over top-3 {.70, .67, .415}: c1 1, c5 .255/.285, c2 0
  final = (.5 S_q^v + .5 S_q^t) x min-max: c1 1.0, c5 1.5 * .255/.285 = 1.342105, c2 0 -> xr: c5 c1 c2 c4 c3
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from xr_fixtures import (
    CROSS_IMAGE,
    CROSS_TEXT,
    QUESTIONS,
    ROLES,
    TEXT_TABLE,
    TableEncoder,
    agent_config,
    make_world,
    official_checkout,
    single_responder,
)

from fake_openai_server import FakeServer
from unirag.cir.agents import FORMATS
from unirag.cir.cache import call_key
from unirag.cir.config import RoleConfig, XRConfig, load_config
from unirag.cir.official_prompts import OfficialPrompts
from unirag.cir.scoring import CoarseResult, coarse_official, fine, normalise
from unirag.cir.xr import XR
from unirag.errors import ConfigError, InputError
from unirag.messages import Message, TextPart
from unirag.profiles import resolve


def _run(tmp_path, url, out="out", profile="official", dataset=None, config=None, **overrides):
    ds = dataset or make_world(tmp_path / "images")
    run = XR(config or agent_config(url), cache_dir=tmp_path / "cache",
                 encoder=TableEncoder(CROSS_TEXT, CROSS_IMAGE, "cross"), text_encoder=TableEncoder(TEXT_TABLE),
                 progress=False, echo=lambda s: None, profile=resolve(profile, **overrides))
    metrics = run.run(ds, tmp_path / out)
    rows = [json.loads(line) for line in (tmp_path / out / "rankings.jsonl").read_text().splitlines()]
    return metrics, rows[0], json.loads((tmp_path / out / "manifest.json").read_text())


# -- arithmetic ------------------------------------------------------------------------------------
def test_description_scores_average_image_and_caption_similarity():
    """01yzzyu/xr.github.io XR/utils/inference_entrypoint_ray.py:943-945 (clip_rank_retrieval_ray):
    similarity = (1 - tau) <d, image> + tau <d, caption>, summed over descriptions (:951-954) and
    divided by their number (:959); XR/xr.py:1560 --tau 0.15; RRF (computed, unused) XR/xr.py:532-539."""
    images = np.array([[1.0, 0.0], [0.0, 1.0]])
    captions = np.array([[0.0, 1.0], [1.0, 0.0]])
    d1, d2 = np.array([1.0, 0.0]), np.array([0.6, 0.8])
    res = coarse_official(captions, images, [d1, d2], [d1, d2], tau=0.15, source="aug")
    # cand 0: d1 .85*1 + .15*0 = .85; d2 .85*.6 + .15*.8 = .63 -> .74
    # cand 1: d1 .85*0 + .15*1 = .15; d2 .85*.8 + .15*.6 = .77 -> .46
    assert res.aug == pytest.approx([0.74, 0.46])
    assert list(res.order) == [0, 1] and res.similarity == pytest.approx([0.74, 0.46])
    assert res.rrf == pytest.approx([1 / 61 + 1 / 62, 1 / 62 + 1 / 61])  # computed, not used under aug


def test_official_rerank_and_all_equal_minmax():
    """01yzzyu/xr.github.io XR/xr.py:990-991 (_do_fusion_rerank) scores (0.5 QA + 0.5 caption) x
    _take_head's min-max of the stage-1 similarity (:939-942), whose all-equal case gives 0 (:943-945;
    unirag: 1)."""
    assert list(normalise([0.3, 0.3, 0.3], ties=0.0)) == [0, 0, 0]
    assert list(normalise([0.3, 0.3, 0.3])) == [1, 1, 1]
    def official(sq_t, sq_v, similarity):
        sim = np.array(similarity)
        top = np.arange(len(sim))
        return fine(top, CoarseResult(sim, sim, sim, top, similarity=sim), np.array(sq_t), np.array(sq_v), 0.5,
                    rerank="official", ties=0.0)[1]

    out = official([2, 1, 0], [0, 2, 2], [0.9, 0.5, 0.1])
    # q = .5*[2,1,0] + .5*[0,2,2] = [1, 1.5, 1]; min-max [1, .5, 0]
    assert out == pytest.approx([1.0, 0.75, 0.0])
    assert list(official([2, 1], [1, 1], [0.4, 0.4])) == [0, 0]


def test_yes_no_readers_follow_the_two_official_paths():
    """01yzzyu/xr.github.io XR/xr.py:793 (_run_qa_path) reads "yes" anywhere in the lower-cased reply
    (``'yes' in r.strip().lower()``); the caption path's _is_yes (:819-821) needs "yes" and no "no"
    substring, also after ``.strip().lower()``."""
    yes_if_contains_yes, yes_without_no = FORMATS["yes_no_any"], FORMATS["yes_no_strict"]
    assert yes_if_contains_yes("Yes.") and yes_if_contains_yes("I would say YES") and not yes_if_contains_yes("No")
    assert yes_without_no("Yes") and not yes_without_no("Yes, nothing else") and not yes_without_no("no")


def test_xr_settings_read_none_and_refuse_unknown_values():
    """The official values themselves act in the whole-run tests below (test_official_run_matches_hand_computation)
    and in test_profile_defaults_fill_only_what_the_config_leaves_unset."""
    assert resolve("default", xr_max_statements="none")["xr_max_statements"] is None
    with pytest.raises(ConfigError, match="xr_questions"):
        resolve("official", xr_questions="several")


def test_profile_defaults_fill_only_what_the_config_leaves_unset():
    """Official defaults apply where the user's config names nothing (XR/xr.py:1532-1536 argparse
    defaults; XR/utils/inference_entrypoint_ray.py:153, :259, :744 max_tokens)."""
    empty = XRConfig()
    empty.apply_profile_defaults(resolve("official"))
    assert empty.encoder == "laion/CLIP-ViT-B-32-laion2B-s34B-b79K"
    assert {r.model for r in empty.roles.values()} == {"hf:OpenGVLab/InternVL3-8B"} and set(empty.roles) == set(ROLES)
    assert empty.roles["question"].max_tokens == 2048 and empty.roles["caption"].max_tokens == 256
    mine = XRConfig(roles={"caption": RoleConfig(model="openai:m", max_tokens=60), "question": RoleConfig("openai:m")},
                    encoder="my-clip")
    mine.apply_profile_defaults(resolve("official"))
    assert mine.encoder == "my-clip" and set(mine.roles) == {"caption", "question"}
    assert (mine.roles["caption"].max_tokens, mine.roles["question"].max_tokens) == (60, 2048)
    offline = XRConfig()
    offline.apply_profile_defaults(resolve("default"))
    assert offline.encoder is None and offline.roles == {}


def test_yaml_profile_and_settings(tmp_path):
    """``profile:`` at the top (or under settings) and single X^R settings in the agents YAML."""
    p = tmp_path / "a.yaml"
    p.write_text("profile: official\nofficial_prompts: xr\nsettings: {xr_prompts: unirag, max_statements: 3, k: 7}\n")
    c = load_config(p)
    s = c.resolve_settings()
    assert s.profile == "official" and s["xr_prompts"] == "unirag" and s["xr_max_statements"] == 3
    assert s["xr_scoring"] == "official" and c.settings.k == 7 and c.official_prompts == str(tmp_path / "xr")
    assert c.resolve_settings("default")["xr_max_statements"] == 3  # the YAML's setting stays under the profile
    assert c.resolve_settings("default", xr_max_statements="none")["xr_max_statements"] is None
    p.write_text("settings: {profile: official, xr_scoring: sometimes}\n")
    with pytest.raises(InputError, match="xr_scoring"):
        load_config(p)


def test_reply_format_is_part_of_the_cache_key():
    """A reply read as yes/no is never reused as a JSON reply of the same prompt (and vice versa)."""
    msgs = [Message("user", [TextPart("Answer the question with Yes or No. The dress is red")])]
    assert call_key("vision_question", "m", msgs) != call_key("vision_question", "m", msgs, "yes_no_any")


# -- official prompts --------------------------------------------------------------------------------
def test_official_prompts_are_read_from_the_checkout_and_filled(tmp_path):
    """01yzzyu/xr.github.io XR/xr.py:66-83 (load_prompt) reads ./prompts/<dataset>/...; :253-260
    (stage1_reason) fills [[INSTRUCTION]] and [[REF_IMAGE_DESC]] (stripped); :652-663 (stage2_verify)
    lists step1 as "   (i) kind: content" lines after a newline."""
    root = official_checkout(tmp_path)
    for where in (root, root / "XR", root / "XR" / "prompts", root / "XR" / "prompts" / "FashionIQ-dress"):
        p = OfficialPrompts(where, "fashioniq", "fashioniq-dress-val")
        assert p.texts["caption"] == "FAKE-CAPTION-PROMPT: say what you see."
    assert p.reasoner("make it red", " a grey dress ") == "FAKE-REASONER instruction=make it red; ref=a grey dress."
    assert p.questions("make it red", [["Color", "red"], ["Keep", "shape"]]) == \
        "FAKE-QUESTIONS instruction=make it red; atomic=\n   (1) Color: red\n   (2) Keep: shape\n."


def test_missing_official_prompts_are_a_config_error_naming_the_file(tmp_path):
    root = official_checkout(tmp_path, skip=("prompt2_stage2_reasoner.txt",))
    with pytest.raises(ConfigError, match=r"prompt file missing: .*FashionIQ-dress/prompt2_stage2_reasoner\.txt"):
        OfficialPrompts(root, "fashioniq", "fashioniq-dress-val")
    with pytest.raises(ConfigError, match="--official-prompts"):
        OfficialPrompts(None, "fashioniq", "fashioniq-dress-val")
    with pytest.raises(ConfigError, match="no prompts for the mbeir"):
        OfficialPrompts(root, "mbeir", "mbeir-x")


# -- whole runs --------------------------------------------------------------------------------------
def test_official_run_matches_hand_computation(tmp_path, official_server):
    """The official pipeline with unirag's imagination prompts (xr_prompts=unirag): description
    scoring (XR/utils/inference_entrypoint_ray.py:943-959), the 'aug' list into stage 2 (XR/xr.py:563-577,
    :1545), one yes/no call per statement (:742 "Answer the question with Yes or No. "), bool("False")
    on the caption path (:836, :881) and (0.5 QA + 0.5 caption) x min-max (:939-945, :990-991).
    Numbers: module docstring."""
    metrics, row, manifest = _run(tmp_path, official_server.url, xr_prompts="unirag")
    assert row["stages"]["xr_coarse"] == ["c1", "c5", "c2", "c4", "c3"]
    assert row["stages"]["xr"] == ["c5", "c1", "c2", "c4", "c3"]
    sc = row["scores"]
    assert set(sc) == {"c1", "c5", "c2"}
    assert [sc[c]["similarity"] for c in ("c1", "c5", "c2")] == pytest.approx([0.70, 0.67, 0.415], abs=1e-6)
    assert [(sc[c]["Sq_t"], sc[c]["Sq_v"]) for c in ("c1", "c5", "c2")] == [(2, 0), (1, 2), (1, 2)]
    assert [sc[c]["final"] for c in ("c1", "c5", "c2")] == pytest.approx([1.0, 1.5 * 0.255 / 0.285, 0.0], abs=1e-6)
    assert sc["c5"]["rrf"] == pytest.approx(1 / 62 + 1 / 61)  # the RRF list exists but is not the one used
    assert metrics["xr"]["R@1"] == 100
    # 6 captions + 2 imaginations + 1 question + (3 captions + 3 images) x 2 statements
    assert len(official_server.requests) == 6 + 2 + 1 + 12
    assert manifest["settings"]["profile"] == "official"
    assert "xr_caption_verifier" in manifest["settings"]["reproduces_official_bugs"]
    assert any("bool(\"False\") is True" in n for n in metrics["notes"])
    # no cap on statements (XR/xr.py:1557 --s2_num_questions None): the question prompt sets no limit
    question = [json.dumps(r.json["messages"]) for r in official_server.requests if "verification statements" in
                json.dumps(r.json["messages"])]
    assert len(question) == 1 and "Write as many statements as the modification text needs." in question[0]


def test_fixed_caption_verifier_counts_the_written_answers(tmp_path, official_server):
    """Without the official bug (xr_caption_verifier=fixed) the caption path compares with the
    expected answers as written: cap1 [T,T] vs [T,F] -> 1, cap5 [T,F] -> 2, cap2 [T,F] -> 2."""
    _, row, manifest = _run(tmp_path, official_server.url, xr_prompts="unirag", xr_caption_verifier="fixed")
    assert [row["scores"][c]["Sq_t"] for c in ("c1", "c5", "c2")] == [1, 2, 2]
    # final: c1 .5*1*1 = .5, c5 (1+1) * .894737, c2 0
    assert row["scores"]["c5"]["final"] == pytest.approx(2.0 * 0.255 / 0.285, abs=1e-6)
    assert "xr_caption_verifier" not in manifest["settings"].get("reproduces_official_bugs", [])


def test_default_run_after_official_reuses_no_official_call(tmp_path, official_server):
    """A paper (default) run on the cache of an official run makes its own calls and keeps its own
    scores (test_pipeline_agents.py's hand computation: xr = c5 c4 c1 c2 c3)."""
    _run(tmp_path, official_server.url, xr_prompts="unirag")
    n = len(official_server.requests)
    _, row, manifest = _run(tmp_path, official_server.url, out="paper", profile="default")
    assert row["stages"]["xr_coarse"] == ["c1", "c5", "c4", "c2", "c3"]
    assert row["ranked"] == ["c5", "c4", "c1", "c2", "c3"]
    assert "similarity" not in row["scores"]["c5"]
    # nothing is shared: other max new tokens (2048/256 vs 400), statement limit and judgement prompts
    assert len(official_server.requests) - n == 15 and manifest["settings"]["profile"] == "default"


def test_official_prompts_from_a_checkout_drive_the_reasoner_and_the_questions(tmp_path, official_server):
    """xr_prompts=official (XR/xr.py:66-83 load_prompt, :253-260 stage1_reason, :650-663 stage2_verify):
    the caption, stage-1 reasoner and stage-2 reasoner prompts come from the user's checkout; the
    reasoner's step2 list is the target descriptions (inference_entrypoint_ray.py:887), its step1 the
    atomic instructions of the question prompt; no vision imagination agent is called; non-pair step2
    entries are dropped (XR/xr.py:703-707)."""
    ds = dataclasses.replace(make_world(tmp_path / "images"), name="fashioniq-dress-val", kind="fashioniq")
    config = agent_config(official_server.url, official_prompts=str(official_checkout(tmp_path)))
    metrics, row, manifest = _run(tmp_path, official_server.url, dataset=ds, config=config)
    assert row["imagination"]["text"]["descriptions"] == ["ct", "cv"]
    assert [s["statement"] for s in row["statements"]] == list(QUESTIONS)
    assert [s["answer"] for s in row["statements"]] == [True, False]
    assert row["stages"]["xr"] == ["c5", "c1", "c2", "c4", "c3"]  # same descriptions and answers as above
    prompts = [json.dumps(r.json["messages"]) for r in official_server.requests]
    assert not any("The image shown is the reference image" in p for p in prompts)
    assert manifest["official_prompts"]["dir"].endswith("XR/prompts/FashionIQ-dress")
    assert "vision_imagination" not in manifest["agent_calls"]


def test_missing_official_prompt_fails_before_any_call(tmp_path, official_server):
    ds = dataclasses.replace(make_world(tmp_path / "images"), name="fashioniq-dress-val", kind="fashioniq")
    config = agent_config(official_server.url, official_prompts=str(official_checkout(tmp_path, skip=("caption.txt",))))
    with pytest.raises(ConfigError, match="caption.txt"):
        _run(tmp_path, official_server.url, dataset=ds, config=config)
    assert official_server.requests == []
    with pytest.raises(ConfigError, match="--official-prompts"):
        _run(tmp_path, official_server.url, dataset=ds)


def test_paper_scoring_with_official_prompts_is_refused(tmp_path, official_server):
    with pytest.raises(ConfigError, match="xr_scoring=paper needs"):
        _run(tmp_path, official_server.url, xr_scoring="paper")


def test_one_candidate_minmax_is_zero_in_the_official_rerank(tmp_path, official_server):
    """01yzzyu/xr.github.io XR/xr.py:943-945 (_take_head): min-max of all-equal similarities (here
    the single top-k' candidate c1) is 0, so every final score is 0; xr_minmax_ties=one keeps the
    question score (c1: .5 * 0 + .5 * 2 = 1.0)."""
    config = agent_config(official_server.url)
    config.settings.k_prime = 1
    _, row, _ = _run(tmp_path, official_server.url, config=config, xr_prompts="unirag")
    assert row["scores"]["c1"]["final"] == 0.0
    _, row, _ = _run(tmp_path, official_server.url, out="ties-one", config=config, xr_prompts="unirag", xr_minmax_ties="one")
    assert row["scores"]["c1"]["final"] == pytest.approx(1.0)


def test_default_profile_prompts_are_unchanged_and_aug_can_be_chosen_alone(tmp_path, official_server):
    """Under the default profile the question prompt still reads "Write at most 5 statements." (so
    earlier caches stay valid); ``xr_stage2_source=aug`` alone ranks the paper's scores by their
    average over the two descriptions: (S^t + S^v) / 2 = c1 1.4, c5 1.2, c2 .9, c4 .84, c3 0."""
    _, row, _ = _run(tmp_path, official_server.url, profile="default", xr_stage2_source="aug")
    assert row["stages"]["xr_coarse"] == ["c1", "c5", "c2", "c4", "c3"]
    assert row["scores"]["c2"]["similarity"] == pytest.approx(0.9, abs=1e-6)
    question = [json.dumps(r.json["messages"]) for r in official_server.requests if "verification statements" in
                json.dumps(r.json["messages"])]
    assert "Write at most 5 statements." in question[0]


def test_failed_caption_is_judged_on_the_stand_in_caption(tmp_path):
    """01yzzyu/xr.github.io XR/xr.py:831 (_run_caption_path): a candidate without caption is judged on
    ``image_caption_dict.get(cand_name, "A photo.")``; xr_failed_caption=skip (unirag's default) makes
    no caption-path call for it (S_q^t 0).

    c5's caption call fails, so its caption similarity is 0: d_ct(c5) = .85*.6 = .51, d_cv(c5) = .85*.8
    = .68, aug .595; order c1 .70, c5 .595, c2 .415 (top-3 unchanged), min-max c5 = .18/.285.
    "A photo." is answered Yes, Yes: S_q^t(c5) = 2 (bug: expected T,T); S_q^v(c5) = 2.
    stand-in: c5 (.5*2 + .5*2) * .18/.285 = 1.263158 > c1 (.5*0 + .5*2) * 1 = 1.0 -> xr c5 c1 c2;
    skip:     c5 (.5*2 + 0) * .18/.285 = .631579 < c1 1.0 -> xr c1 c5 c2."""
    root = tmp_path / "images"
    make_world(root)
    with FakeServer(responder=single_responder(root, fail_captions=("c5",), stand_in_answers=(True, True))) as srv:
        metrics, row, manifest = _run(tmp_path, srv.url, xr_prompts="unirag")
        stand_in_calls = [r for r in srv.requests if "caption of an image:\\nA photo.\\n" in json.dumps(r.json)]
        assert len(stand_in_calls) == 2  # one yes/no call per statement
        sc = row["scores"]
        assert sc["c5"]["similarity"] == pytest.approx(0.595, abs=1e-6)
        assert [(sc[c]["Sq_t"], sc[c]["Sq_v"]) for c in ("c1", "c5", "c2")] == [(2, 0), (2, 2), (1, 2)]
        assert sc["c5"]["final"] == pytest.approx(2 * 0.18 / 0.285, abs=1e-6)
        assert row["stages"]["xr"][:3] == ["c5", "c1", "c2"]
        assert manifest["settings"]["settings"]["xr_failed_caption"] == "stand-in"
        assert any("stand-in caption 'A photo.'" in n for n in metrics["notes"])

        n = len(srv.requests)
        _, row, _ = _run(tmp_path, srv.url, out="skip", xr_prompts="unirag", xr_failed_caption="skip")
        new = srv.requests[n:]
        assert not [r for r in new if "A photo." in json.dumps(r.json)]
        assert row["scores"]["c5"]["Sq_t"] == 0
        assert row["scores"]["c5"]["final"] == pytest.approx(0.18 / 0.285, abs=1e-6)
        assert row["stages"]["xr"][:3] == ["c1", "c5", "c2"]
