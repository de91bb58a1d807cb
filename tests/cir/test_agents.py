"""Agent reply parsing, repair and re-asking; prompt files; role -> model YAML."""

from __future__ import annotations

import pytest

from unirag.cir.agents import ROLES, MalformedOutput, build_messages, call_agent, extract_json, parse_reply
from unirag.cir.config import load_config
from unirag.errors import BackendError, ConfigError, InputError
from unirag.generators.base import Generation, GenerationOptions


def test_extract_json_repairs_fences_prose_trailing_commas_and_python_literals():
    assert extract_json('{"a": 1}') == ({"a": 1}, False)
    assert extract_json('Sure:\n```json\n{"a": [1, 2,],}\n```\nthanks') == ({"a": [1, 2]}, True)
    assert extract_json("Answer: {'answers': [True, False]} done") == ({"answers": [True, False]}, True)
    assert extract_json('text {"s": "a } brace"} more {"b": 2}') == ({"s": "a } brace"}, True)
    with pytest.raises(MalformedOutput):
        extract_json("no json here")


def test_parse_reply_validates_schema_and_coerces_boolean_words():
    out, _ = parse_reply("question", '{"statements": [{"statement": "It is red", "answer": "True"}]}')
    assert out == {"statements": [{"statement": "It is red", "answer": True}]}
    with pytest.raises(MalformedOutput, match="missing field 'answer'"):
        parse_reply("question", '{"statements": [{"statement": "It is red"}]}')
    with pytest.raises(MalformedOutput, match="at least 1"):
        parse_reply("question", '{"statements": []}')
    with pytest.raises(MalformedOutput, match="expected 2 answers"):
        parse_reply("text_question", '{"answers": [true]}', expect_answers=2)
    with pytest.raises(MalformedOutput, match="true or false"):
        parse_reply("vision_question", '{"answers": ["maybe"]}')
    assert parse_reply("caption", '  "a red dress"\n') == ("a red dress", False)
    with pytest.raises(MalformedOutput):
        parse_reply("caption", "   ")


class Scripted:
    """A generator returning prepared replies and recording what it was sent."""

    def __init__(self, *replies):
        self.replies, self.seen = list(replies), []

    def generate(self, messages, options=None):
        self.seen.append((messages, options))
        return Generation(self.replies.pop(0))


def test_call_agent_reasks_with_the_error_then_fails_non_retryably():
    gen = Scripted("no idea", '{"answers": [true, false]}')
    msgs = build_messages("text_question", caption="a red dress", statements="1. red\n2. long")
    out = call_agent(gen, "text_question", msgs, GenerationOptions(), json_attempts=3, expect_answers=2)
    assert out["output"] == {"answers": [True, False]} and out["calls"] == 2
    second = gen.seen[1][0]
    assert [m.role for m in second] == ["user", "assistant", "user"] and "not valid" in second[2].text
    assert gen.seen[0][1].json_schema == ROLES["text_question"].schema  # JSON mode requested
    with pytest.raises(BackendError, match="malformed reply after 2 call") as e:
        call_agent(Scripted("x", "y"), "text_question", msgs, json_attempts=2)
    assert e.value.retryable is False


def test_prompts_come_from_files_and_need_their_values(tmp_path):
    msgs = build_messages("text_imagination", reference_caption="a grey dress", modification="make it red")
    assert "Reference caption: a grey dress" in msgs[0].text and "make it red" in msgs[0].text
    with pytest.raises(ConfigError, match="needs the value"):
        build_messages("text_imagination", modification="x")
    with pytest.raises(ValueError, match="needs an image"):
        build_messages("caption")


def test_agents_yaml(tmp_path):
    cfg = tmp_path / "a.yaml"
    cfg.write_text("defaults: {model: 'openai:gpt-4o-mini', base_url: 'http://127.0.0.1:1/v1', temperature: 0}\n"
                   "roles:\n  caption: {model: 'hf:/models/llava', max_tokens: 60}\n"
                   "settings: {lambda: 0.3, k_prime: 20}\n")
    c = load_config(cfg)
    assert set(c.roles) == set(ROLES) and c.roles["caption"].model == "hf:/models/llava"
    assert c.roles["caption"].max_tokens == 60 and c.roles["question"].options == {"base_url": "http://127.0.0.1:1/v1"}
    assert (c.settings.lam, c.settings.k_prime, c.settings.rrf_k) == (0.3, 20, 60)
    # moving the server does not invalidate cached replies; changing the model does
    other = load_config(cfg)
    other.roles["question"].options["base_url"] = "http://127.0.0.1:2/v1"
    assert other.roles["question"].fingerprint() == c.roles["question"].fingerprint()
    assert c.roles["caption"].fingerprint() != c.roles["question"].fingerprint()
    assert load_config(None).roles == {}
    for text, match in [("roles: {captioner: {model: 'x:y'}}", "unknown agent role"),
                        ("defaults: {model: 'openai:x', api_key: 'sk-1'}", "secrets are not accepted"),
                        ("roles: {caption: {max_tokens: 5}}", "needs a model spec"),
                        ("settings: {lambda: 2}", "lambda must lie"), ("settings: {tau: 1.5}", "tau must lie"),
                        ("settings: {kprime: 2}", "unknown setting"),
                        ("colour: red", "unknown key"),
                        ("defaults: [", "malformed YAML")]:
        cfg.write_text(text)
        with pytest.raises((InputError, ConfigError), match=match):
            load_config(cfg)


def test_example_agents_yaml_parses():
    from pathlib import Path

    c = load_config(Path(__file__).resolve().parents[2] / "examples" / "xr_agents.yaml")
    assert set(c.roles) == set(ROLES) and c.roles["caption"].max_tokens == 120
    assert c.settings.k_prime == 100 and c.settings.lam == 0.5  # the official X^R --top_k (XR/xr.py:1561)
