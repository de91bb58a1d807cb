"""The official X^R agent configuration (examples/xr_agents_official.yaml) and the hf: loader's
``trust_remote_code`` opt-in that its custom-code model (InternVL3-8B) needs."""

from __future__ import annotations

from pathlib import Path

import pytest

from unirag.cir.config import load_config
from unirag.errors import ConfigError
from unirag.generators.registry import load_generator

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "xr_agents_official.yaml"


def test_official_agents_example_leaves_every_limit_to_the_profile():
    """01yzzyu/xr.github.io XR/xr.py:1532-1534 (every agent is --llm_path/--mllm_path/--img_cap_model_path,
    default InternVL3-8B) and :1536 (--clip_path); XR/utils/inference_entrypoint_ray.py:153, :256-262
    (temperature=0, max_tokens=2048) and :741-747 (captions: max_tokens=256, repetition_penalty=1.05); the
    models load with ``LLM(..., trust_remote_code=True)`` (:154-157). The example sets
    none of these limits, so ``--profile official`` applies them unchanged (the issue: the old advice, copy
    examples/xr_agents.yaml, overrode them with 400/120)."""
    config = load_config(EXAMPLE)
    settings = config.resolve_settings(None)
    assert settings.profile == "official" and not settings.overrides
    config.apply_profile_defaults(settings)
    assert config.encoder == settings["xr_encoder"]
    for role, rc in config.roles.items():
        assert rc.model == settings["xr_agent_model"] and rc.options["trust_remote_code"] is True, role
        limit = settings["xr_caption_max_new_tokens" if role == "caption" else "xr_max_new_tokens"]
        assert rc.max_tokens == limit and rc.temperature == 0, role  # SamplingParams(temperature=0, ...)
    assert config.roles["caption"].repetition_penalty == settings["xr_caption_repetition_penalty"]
    assert (config.roles["question"].max_tokens, config.roles["caption"].max_tokens) == (2048, 256)
    assert (config.roles["question"].model, config.roles["caption"].repetition_penalty) == (
        "hf:OpenGVLab/InternVL3-8B", 1.05)  # the official values the run gets (cited above)


class _Loaded(Exception):
    pass


@pytest.fixture
def from_pretrained_calls(monkeypatch):
    import transformers

    calls = []

    def fake(kind):
        def from_pretrained(source, **kwargs):
            calls.append((kind, kwargs))
            if kind == "model":
                raise _Loaded
            return object()
        return from_pretrained

    monkeypatch.setattr(transformers.AutoProcessor, "from_pretrained", fake("processor"))
    monkeypatch.setattr(transformers.AutoModelForImageTextToText, "from_pretrained", fake("model"))
    return calls


def test_trust_remote_code_is_off_unless_asked_and_recorded(from_pretrained_calls, tmp_path):
    """A custom-code checkpoint runs its own Python only when the user opts in (hf: loader, grid option,
    agents YAML, --option trust_remote_code=true); the generator config (hence the run manifest) records the opt-in."""
    for trust in (False, True):
        gen = load_generator(f"hf:{tmp_path}", device="cpu", dtype="float32",
                                  **({"trust_remote_code": True} if trust else {}))
        with pytest.raises(_Loaded):
            gen._load()
        assert ("trust_remote_code" in gen.config()) is trust
    (_, p0), (_, m0), (_, p1), (_, m1) = from_pretrained_calls
    assert "trust_remote_code" not in p0 and "trust_remote_code" not in m0
    assert p1["trust_remote_code"] is True and m1["trust_remote_code"] is True


def test_a_custom_code_checkpoint_without_the_opt_in_names_the_option(monkeypatch, tmp_path):
    import transformers

    def refuse(source, **kwargs):
        raise ValueError("The repository contains custom code which must be executed; pass trust_remote_code=True")

    monkeypatch.setattr(transformers.AutoProcessor, "from_pretrained", refuse)
    with pytest.raises(ConfigError, match="trust_remote_code=true if you trust it"):
        load_generator(f"hf:{tmp_path}", device="cpu")._load()
