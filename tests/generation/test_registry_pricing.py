"""Generator specs and cost accounting (paper Table 8 defaults, overrides)."""

from __future__ import annotations

import pytest

from unirag.errors import ConfigError, InputError
from unirag.generators.base import Usage
from unirag.generators.pricing import DEFAULT_PRICES, Price, cost_usd, price_for, read_prices
from unirag.generators.registry import load_generator, parse_spec


def test_parse_spec():
    assert parse_spec("openai:gpt-4o") == ("openai", "gpt-4o")
    assert parse_spec("hf:/models/llava") == ("hf", "/models/llava")
    assert parse_spec("HF:llava-hf/llava-1.5-7b-hf") == ("hf", "llava-hf/llava-1.5-7b-hf")
    for bad in ("gpt-4o", "foo:bar", ""):
        with pytest.raises(ConfigError, match="valid forms: openai:.*gemini:.*hf:.*retrieval:"):
            parse_spec(bad)
    with pytest.raises(ConfigError, match="lacks a name"):
        parse_spec("openai:")


def test_options_a_backend_does_not_take_are_ignored_and_families_checked(no_api_keys):
    gen = load_generator("retrieval:top1", base_url="http://x", device="cpu", batch_size=None)
    assert gen.spec == "retrieval:top1" and gen.device == "cpu"
    with pytest.raises(ConfigError, match="unknown prompt family"):
        load_generator("retrieval:top1", family="blip")
    with pytest.raises(ConfigError, match="top1 or retrieval:consensus"):
        load_generator("retrieval:best")
    llava_server = load_generator("openai:llava-1.5", base_url="http://127.0.0.1:9/v1", family="llava")
    assert (llava_server.template_family, llava_server.image_mode) == ("llava", "single-image")


def test_table8_costs():
    usage = Usage(input_tokens=3000, input_text_tokens=1000, input_images=2, input_image_tokens=2000,
                  output_tokens=500)
    # GPT-4o: 1k text x 0.005 + 2k image tokens x 0.015 + 0.5k output x 0.005
    assert cost_usd(usage, price_for("openai:gpt-4o")) == pytest.approx(0.005 + 0.030 + 0.0025)
    assert price_for("openai:gpt-4o-2024-05-13") == DEFAULT_PRICES["gpt-4o"]
    assert price_for("openai:gpt-4o-mini") is None  # not the same model: no silent wrong price
    # Gemini-Pro: 1k text x 0.000125 + 2 images x 0.0025 + 0.5k output x 0.000375
    gem = Usage(input_tokens=1516, input_text_tokens=1000, input_images=2, output_tokens=500)
    assert cost_usd(gem, price_for("gemini:gemini-1.5-pro")) == pytest.approx(0.000125 + 0.005 + 0.0001875)
    assert cost_usd(usage, price_for("hf:llava-hf/llava-1.5-7b-hf")) == 0.0
    assert cost_usd(usage, None) is None


def test_price_overrides(tmp_path):
    f = tmp_path / "prices.yaml"
    f.write_text("gpt-4o: {input_text_per_1k: 0.0025, output_per_1k: 0.01}\nmy-model: {output_per_1k: 1}\n")
    assert read_prices(f)["gpt-4o"] == Price(input_text_per_1k=0.0025, output_per_1k=0.01)
    assert price_for("openai:gpt-4o", f) == Price(input_text_per_1k=0.0025, output_per_1k=0.01)
    assert price_for("openai:my-model", f).output_per_1k == 1.0
    assert price_for("openai:my-model", {"my-model": {"output_per_1k": 2}}).output_per_1k == 2.0
    assert price_for("openai-image:gpt-image-1", f, image=True).output_per_1k == 0.040  # image defaults kept
    assert price_for("openai-image:gpt-image-1", f, image=True, local=True) == Price()
    f.write_text('{"gpt-4o": {"per_token": 1}}')
    f2 = tmp_path / "p.json"
    f2.write_text('{"gpt-4o": {"per_token": 1}}')
    with pytest.raises(InputError, match="unknown price field.*per_token"):
        read_prices(f2)
    with pytest.raises(InputError, match="not found"):
        read_prices(tmp_path / "missing.json")
