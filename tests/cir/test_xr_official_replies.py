"""How the official X^R code reads its agents' replies, and what it sends with them: the JSON reading
(``xr_json_parsing``), the caption call's repetition penalty (``xr_caption_repetition_penalty``), the
image path's exact answer strings (``xr_answer_matching``) and the optional cir-v2 reasoner and caption
rewriter (``xr_stage1_schema``, ``xr_rewrite_caption``). Official code: 01yzzyu/xr.github.io, XR/, at
commit cf44a37; each test cites the lines it follows.

The world, its vectors and the hand computation of its scores are in xr_fixtures.py and
test_xr_official.py's module docstring (descriptions "ct", "cv"; tau 0.15; k' = 3).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest
from xr_fixtures import (
    CROSS_IMAGE,
    CROSS_TEXT,
    OPTIONAL_PROMPTS,
    TEXT_TABLE,
    TableEncoder,
    agent_config,
    make_world,
    official_checkout,
    prompt_of,
    single_responder,
)

from fake_openai_server import FakeServer, Reply
from unirag.cir.agents import (
    call_agent,
    clean_rewritten_caption,
    extract_json,
    official_json,
    parse_official,
)
from unirag.cir.config import RoleConfig, XRConfig
from unirag.cir.pipeline import official_answer_string, official_bool
from unirag.cir.xr import XR
from unirag.generators.base import Generation, GenerationOptions
from unirag.messages import Message, TextPart
from unirag.profiles import resolve


@pytest.fixture()
def server(tmp_path):
    """The official_server of conftest.py with per-test replies: ``srv.override[prefix] = reply text``
    answers every prompt starting with ``prefix`` (checked before the world's own replies)."""
    root = tmp_path / "images"
    make_world(root)
    inner = single_responder(root)
    override: dict[str, str] = {}

    def reply(req):
        prompt = prompt_of(req.json)
        for prefix, text in override.items():
            if prompt.startswith(prefix):
                return Reply.chat(text)
        return inner(req)

    with FakeServer(responder=reply) as srv:
        srv.override = override
        yield srv


def _run(tmp_path, url, out="out", profile="official", extra=None, **overrides):
    ds = dataclasses.replace(make_world(tmp_path / "images"), name="fashioniq-dress-val", kind="fashioniq")
    config = agent_config(url, official_prompts=str(official_checkout(tmp_path / out, extra=extra)))
    run = XR(config, cache_dir=tmp_path / out / "cache",
                 encoder=TableEncoder(CROSS_TEXT, CROSS_IMAGE, "cross"), text_encoder=TableEncoder(TEXT_TABLE),
                 progress=False, echo=lambda s: None, profile=resolve(profile, **overrides))
    metrics = run.run(ds, tmp_path / out)
    row = json.loads((tmp_path / out / "rankings.jsonl").read_text().splitlines()[0])
    return metrics, row, json.loads((tmp_path / out / "manifest.json").read_text())


def _prompts(srv, prefix):
    return [prompt_of(r.json) for r in srv.requests if prompt_of(r.json).startswith(prefix)]


# -- a. the JSON reading ---------------------------------------------------------------------------
def test_official_json_reading_is_the_fence_else_the_first_braces_and_one_repair():
    """XR/xr.py:295-303 (stage1_reason) and :689-697 (stage2_verify): ``re.search`` of the ```json
    fence, else of ``(\\{[\\s\\S]*?\\})`` (non-greedy: the first '{' to the first '}'), then
    ``json.loads(repair_json(...))`` once; XR/requirements.txt pins json_repair 0.29.6."""
    fenced = 'Reasoning.\n```json\n{"step1": [["Color", "red"],], "step2": ["ct", "cv",]\n```\nand {"x": 1}'
    assert official_json(fenced) == {"step1": [["Color", "red"]], "step2": ["ct", "cv"]}  # repaired commas
    nested = 'Here: {"meta": {"n": 2}, "step1": [["Color", "red"]], "step2": ["ct", "cv"]}'
    assert official_json(nested) == {"meta": {"n": 2}}  # cut at the first '}', the rest lost
    assert extract_json(nested)[0]["step2"] == ["ct", "cv"]  # unirag's reading keeps the whole object
    assert official_json('{"step2": ["ct", "cv"') is None  # truncated: no '}' at all, so no match
    assert official_json("I would make it red.") is None
    assert official_json("{'step2': ['ct']}") == {"step2": ["ct"]}  # single quotes: json_repair fixes them


def test_reasoner_and_question_replies_read_once_never_raise():
    """XR/xr.py:305-314: no JSON -> the stand-in (marked ``no_json``; step2 missing or empty -> [C_r]
    is filled by the run); :703-707: only [question, answer] lists are kept; :696-701 and :720-721:
    no JSON -> no questions."""
    assert parse_official("official_reasoner+json_repair", "no idea") == {"step1": [], "step2": [], "no_json": True}
    assert parse_official("official_reasoner+json_repair", '{"step1": [["Color", "red"], ["bad"]]}') == \
        {"step1": [["Color", "red"]], "step2": []}
    got = parse_official("official_questions+json_repair", '{"step2": [["Is the dress red?", "True"], ["not a pair"], "x"]}')
    assert got == {"statements": [{"statement": "Is the dress red?", "answer": True, "answer_raw": "True"}]}
    assert parse_official("official_questions+json_repair", "Sorry.") == {"statements": [], "no_json": True}


class _Counting:
    """A generator that always answers ``text`` and counts its calls."""

    def __init__(self, text):
        self.text, self.calls = text, 0

    def generate(self, messages, options=None):
        self.calls += 1
        return Generation(text=self.text)


def test_the_official_reading_never_asks_again():
    """The official code makes one reasoner call per query and never repeats it (XR/xr.py:262-272 then
    :294-314); unirag's reading asks again up to json_attempts times."""
    msgs = [Message("user", [TextPart("FAKE-REASONER")])]
    once = _Counting("no JSON at all")
    out = call_agent(once, "text_imagination", msgs, json_attempts=3, fmt="official_reasoner+json_repair")
    assert once.calls == 1 and out["output"]["no_json"] is True
    again = _Counting("no JSON at all")
    with pytest.raises(Exception, match="malformed reply after 3"):
        call_agent(again, "text_imagination", msgs, json_attempts=3, fmt="official_reasoner")
    assert again.calls == 3


def test_reasoner_without_json_gets_the_official_stand_in_in_a_run(tmp_path, server):
    """XR/xr.py:308-313: no JSON in the stage-1 reply -> step1 [["Modification", T_m]], step2 [C_r];
    the stage-2 prompt then lists "(1) Modification: make it red" (:652-663). One reasoner call only."""
    server.override["FAKE-REASONER"] = "I think the dress should be red."
    metrics, row, manifest = _run(tmp_path, server.url)
    assert len(_prompts(server, "FAKE-REASONER")) == 1
    assert row["imagination"]["text"]["descriptions"] == ["capr"]
    assert "atomic=\n   (1) Modification: make it red\n." in _prompts(server, "FAKE-QUESTIONS")[0]
    assert any("official stand-in" in n for n in row["notes"])
    assert manifest["settings"]["settings"]["xr_json_parsing"] == "official"
    # unirag's reading asks the same reasoner three times (json_attempts) before the stand-in
    _run(tmp_path, server.url, out="unirag-json", xr_json_parsing="unirag")
    assert len(_prompts(server, "FAKE-REASONER")) == 1 + 3


def test_questions_without_json_mean_no_verification(tmp_path, server):
    """XR/xr.py:696-701, :720-721: a stage-2 reply without JSON gives the item no questions, so no
    yes/no call is made for it and every candidate's count is 0 (:787-807, :869-890)."""
    server.override["FAKE-QUESTIONS"] = "I have no questions."
    _, row, _ = _run(tmp_path, server.url)
    assert row["statements"] == [] and not _prompts(server, "Answer the question with Yes or No.")
    assert any("no [question, answer] pair" in n for n in row["notes"])
    assert row["stages"]["xr"] == row["stages"]["xr_coarse"]  # nothing to re-rank by


# -- b. repetition penalty of the caption calls ------------------------------------------------------
def test_caption_calls_carry_the_official_repetition_penalty(tmp_path, server):
    """XR/utils/inference_entrypoint_ray.py:741-747 (mllm_inference_for_caption_ray):
    ``SamplingParams(temperature=0, top_p=1, max_tokens=256, repetition_penalty=1.05, ...)``; the
    other calls (:153, :256-262) send none. An OpenAI-compatible server (vLLM) gets it in the body."""
    _run(tmp_path, server.url)
    bodies = [r.json for r in server.requests]
    captions = [b for b in bodies if prompt_of(b).startswith("FAKE-CAPTION-PROMPT")]
    assert captions and all(b["repetition_penalty"] == 1.05 and b["max_tokens"] == 256 for b in captions)
    assert all("repetition_penalty" not in b for b in bodies if b not in captions)
    n = len(server.requests)
    _run(tmp_path, server.url, out="default", profile="default", xr_prompts="official", xr_scoring="official")
    assert all("repetition_penalty" not in r.json for r in server.requests[n:])


def test_repetition_penalty_reaches_hf_generate(tmp_path, monkeypatch):
    """The hf backend passes it to ``generate(repetition_penalty=...)`` (a real tiny LLaVA runs with it)."""
    from transformers import LlavaForConditionalGeneration

    from tiny_models import tiny_llava_dir
    from unirag.generators.registry import load_generator
    from unirag.messages import ImagePart

    seen = []
    original = LlavaForConditionalGeneration.generate

    def recording(self, **kwargs):
        seen.append(kwargs.get("repetition_penalty"))
        return original(self, **kwargs)

    monkeypatch.setattr(LlavaForConditionalGeneration, "generate", recording)
    make_world(tmp_path / "w")
    gen = load_generator(f"hf:{tiny_llava_dir()}", device="cpu")
    msgs = [Message("user", [ImagePart(path=tmp_path / "w" / "c1.png"), TextPart("Describe this image.")])]
    out = gen.generate(msgs, GenerationOptions(max_tokens=3, repetition_penalty=1.05))
    gen.generate(msgs, GenerationOptions(max_tokens=3))
    assert seen == [1.05, None] and out.text


def test_caption_role_gets_the_penalty_only_where_it_sets_none():
    """The setting fills the caption role only; a role's own ``repetition_penalty`` wins; the call
    cache key of a role without one is unchanged (earlier caches stay valid)."""
    c = XRConfig(roles={"caption": RoleConfig("openai:m"), "question": RoleConfig("openai:m"),
                        "text_imagination": RoleConfig("openai:m", repetition_penalty=1.2)})
    c.apply_profile_defaults(resolve("official"))
    assert c.roles["caption"].generation_options().repetition_penalty == 1.05
    # the key formula of earlier versions, for a role without a penalty
    earlier = hashlib.sha256(json.dumps({"model": "openai:m", "gen": [2048, 0.0, None], "options": {}},
                                        sort_keys=True).encode()).hexdigest()[:16]
    assert c.roles["question"].repetition_penalty is None and c.roles["question"].fingerprint() == earlier
    assert c.roles["caption"].fingerprint() != RoleConfig("openai:m", max_tokens=256).fingerprint()
    assert c.roles["text_imagination"].repetition_penalty == 1.2
    d = XRConfig(roles={"caption": RoleConfig("openai:m")})
    d.apply_profile_defaults(resolve("default"))
    assert d.roles["caption"].repetition_penalty is None


# -- c. the answers' normalisation ---------------------------------------------------------------------
def test_answer_readings_lowercase_the_reply_and_compare_the_written_answer():
    """XR/xr.py:793-795 (_run_qa_path): the reply is lower-cased (``'yes' in r.strip().lower()``) into
    'True'/'False' and compared with ``==`` to the expected answer AS WRITTEN, so only the strings
    "True"/"False" can match; :836, :881 (_run_caption_path): the expected answer is ``bool(q_ans)``."""
    written = [{"statement": "s", "answer": a, "answer_raw": r} for a, r in
               ((True, "True"), (False, "False"), (True, True), (False, False), (True, "true"), (True, "yes"))]
    assert [official_answer_string(s) for s in written] == [True, False, None, None, None, None]
    assert [official_bool(s) for s in written] == [True, True, True, False, True, True]  # bool("False") is True
    ours = {"statement": "s", "answer": False}  # unirag's own question agent: JSON booleans, no raw string
    assert official_answer_string(ours) is False and official_bool(ours) is True


def test_json_boolean_answers_never_match_on_the_image_path(tmp_path, server):
    """With answers written as JSON true/false the official image path scores 0 for every candidate
    (XR/xr.py:794-795: 'True' == True is False), while its caption path reads bool(False) = False
    (:881): S_q^t = cap1 [T,T] vs [T,F] -> 1, cap5 -> 2, cap2 -> 2; xr_answer_matching=boolean reads
    them as booleans (S_q^v c1 0, c5 2, c2 2, test_xr_official.py)."""
    server.override["FAKE-QUESTIONS"] = json.dumps(
        {"step2": [["Is the dress red?", True], ["Does the dress have sleeves?", False]]})
    _, row, _ = _run(tmp_path, server.url)
    assert [(row["scores"][c]["Sq_t"], row["scores"][c]["Sq_v"]) for c in ("c1", "c5", "c2")] == \
        [(1, 0), (2, 0), (2, 0)]
    # final = (.5 * 0 + .5 * S_q^t) x min-max: c1 .5, c5 1 * .255/.285, c2 0
    assert [row["scores"][c]["final"] for c in ("c1", "c5", "c2")] == pytest.approx([0.5, 0.255 / 0.285, 0.0])
    _, row, _ = _run(tmp_path, server.url, out="boolean", xr_answer_matching="boolean")
    assert [row["scores"][c]["Sq_v"] for c in ("c1", "c5", "c2")] == [0, 2, 2]


# -- d. the cir-v2 reasoner and the caption rewriter ------------------------------------------------------
V2_REPLY = 'Structured: {"target": {"color": "red"}, "keep": ["shape"]} done'


def test_cir_v2_reading_and_rewriter_cleaning():
    """XR/xr.py:341-357: the whole stripped reply through one repair pass, else the fence or the
    GREEDY first-'{'-to-last-'}' match; kept only if a non-empty object. :410-417: the rewriter's
    reply loses a leading code fence and one pair of enclosing double quotes."""
    assert official_json(V2_REPLY, v2=True) == {"target": {"color": "red"}, "keep": ["shape"]}
    assert official_json("Nothing structured.", v2=True) is None and official_json("{}", v2=True) is None
    assert clean_rewritten_caption('```text\n"a red dress"\n```') == "a red dress"
    assert clean_rewritten_caption('  "a red dress"  ') == "a red dress"
    assert clean_rewritten_caption('A "red" dress') == 'A "red" dress'


def test_rewritten_caption_joins_the_aug_descriptions(tmp_path, server):
    """Official defaults (XR/xr.py:1551 --stage1_schema both, :1554 --stage1_rewrite_caption default
    True): with the two optional files in the checkout (:72-76, :86-89), the cir-v2 reasoner runs on
    the v1 placeholders (:317-327), the rewriter gets ``{user_query}`` = T_m and ``{detail_json_str}`` =
    ``json.dumps(v2, ensure_ascii=False, separators=(',', ': '))`` (:384-389), and its cleaned reply
    is appended to the step2 descriptions of the 'aug' list (:455-458).

    Descriptions ct, cv, ct: aug c1 (.77 + .63 + .77) / 3 = .723333, c5 (.51 + .83 + .51) / 3 = .616667,
    c2 (.15 + .68 + .15) / 3 = .326667 (vs .70, .67, .415 with ct and cv only)."""
    server.override["FAKE-V2"] = V2_REPLY
    server.override["FAKE-REWRITER"] = '```text\n"ct"\n```'
    _, row, manifest = _run(tmp_path, server.url, extra=OPTIONAL_PROMPTS)
    assert _prompts(server, "FAKE-V2") == ["FAKE-V2 instruction=make it red; ref=capr."]
    assert _prompts(server, "FAKE-REWRITER") == [
        'FAKE-REWRITER q=make it red d={"target": {"color": "red"},"keep": ["shape"]}']
    imag = row["imagination"]["text"]
    assert imag["descriptions"] == ["ct", "cv", "ct"] and imag["rewritten_caption"] == "ct"
    assert [row["scores"][c]["similarity"] for c in ("c1", "c5", "c2")] == \
        pytest.approx([2.17 / 3, 1.85 / 3, 0.98 / 3], abs=1e-6)
    assert manifest["official_prompts"]["optional_present"] == sorted(OPTIONAL_PROMPTS)


def test_cir_v2_stages_follow_their_settings_and_the_files(tmp_path, server):
    """Without the optional files the official code skips both stages (XR/xr.py:317, :361); a v2 reply
    that is no object gets no rewriter call (:377-380); the default profile runs neither (v1, off)."""
    server.override["FAKE-V2"] = V2_REPLY
    server.override["FAKE-REWRITER"] = "ct"
    _, row, _ = _run(tmp_path, server.url)  # files absent
    assert not _prompts(server, "FAKE-V2") and row["imagination"]["text"]["descriptions"] == ["ct", "cv"]
    assert any("prompt1_stage1_reasoner_v2.txt absent" in n for n in json.loads(
        (tmp_path / "out" / "metrics.json").read_text())["notes"])
    _, row, _ = _run(tmp_path, server.url, out="off", extra=OPTIONAL_PROMPTS, xr_rewrite_caption="off")
    assert len(_prompts(server, "FAKE-V2")) == 1 and not _prompts(server, "FAKE-REWRITER")
    server.override["FAKE-V2"] = "No structure today."
    _run(tmp_path, server.url, out="no-v2", extra=OPTIONAL_PROMPTS)
    assert len(_prompts(server, "FAKE-V2")) == 2 and not _prompts(server, "FAKE-REWRITER")
    n = len(server.requests)
    _run(tmp_path, server.url, out="default", profile="default", extra=OPTIONAL_PROMPTS, xr_prompts="official",
         xr_scoring="official")
    assert len(_prompts(server, "FAKE-V2")) == 2 and not _prompts(server, "FAKE-REWRITER") and \
        len(server.requests) > n  # the default profile ran, with the optional files present, and called neither
