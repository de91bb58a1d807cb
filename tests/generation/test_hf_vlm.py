"""A tiny random LLaVA (built from a config, saved, loaded like a real checkpoint) captioning real COCO images."""

from __future__ import annotations

import json

import pytest

from tiny_models import tiny_llava_dir
from unirag.errors import ConfigError
from unirag.generators.registry import load_generator
from unirag.pipelines.caption import CaptionConfig, run_captioning
from unirag.runs.engine import EngineOptions


@pytest.fixture(scope="module")
def llava_path():
    return tiny_llava_dir()


def test_tiny_llava_rag_run_end_to_end(coco_set, llava_path, tmp_path):
    out = tmp_path / "run"
    cfg = CaptionConfig(queries=coco_set["queries"], generator=f"hf:{llava_path}", out=out, mode="rag", k=2,
                        images_root=coco_set["images_root"], retrieval=coco_set["run"], limit=3, max_tokens=5,
                        generator_options={"batch_size": 2, "device": "cpu", "dtype": "float32"}, progress=False)
    summary = run_captioning(cfg)
    recs = [json.loads(x) for x in (out / "outputs.jsonl").read_text().splitlines()]
    assert len(recs) == 3 and len({r["qid"] for r in recs}) == 3
    # the tiny model says only lowercase letters, never end-of-sequence: 5 new tokens, 5 letters, per query
    for r in recs:
        assert r["status"] == "ok", r
        assert r["caption"].isalpha() and r["caption"].islower() and len(r["caption"]) == 5
        assert r["usage"]["input_images"] == 1 and r["usage"]["output_tokens"] == 5
    assert summary["counts"] == {"queries": 3, "ok": 3, "error": 0, "missing": 0}
    m = json.loads((out / "manifest.json").read_text())
    assert m["identity"]["generator"]["template_family"] == "llava"
    assert m["identity"]["templates"][0]["file"] == "caption_llava.txt"
    # single-image family: each of the 3 saved prompts (default save_prompts=5 > 3 queries) has its merged image
    merged = sorted((out / "prompts").glob("*_merged.png"))
    assert len(merged) == 3 and all(p.stat().st_size > 0 for p in merged)


def test_empty_answers_are_recorded_failures_not_empty_captions(coco_set, tmp_path):
    out = tmp_path / "run"
    cfg = CaptionConfig(queries=coco_set["queries"], generator=f"hf:{tiny_llava_dir(emits='nothing')}", out=out,
                        mode="rag", k=2, images_root=coco_set["images_root"], retrieval=coco_set["run"], limit=3,
                        max_tokens=5, generator_options={"batch_size": 2, "device": "cpu", "dtype": "float32"},
                        progress=False)
    summary = run_captioning(cfg)
    recs = [json.loads(x) for x in (out / "outputs.jsonl").read_text().splitlines()]
    assert len(recs) == 3
    assert all(r["status"] == "error" and "empty caption" in r["error"] and "caption" not in r for r in recs)
    assert summary["counts"] == {"queries": 3, "ok": 0, "error": 3, "missing": 0}


def test_chat_template_and_batch(coco_set, llava_path):
    gen = load_generator(f"hf:{llava_path}", batch_size=2, device="cpu")
    from unirag.prompts.caption import build_caption_prompt, caption_template

    img = coco_set["images_root"] / coco_set["rows"][0]["image"]
    prompt = build_caption_prompt(caption_template("llava"), img, [])
    text = gen.sent_prompt(prompt.messages)
    assert text.startswith("USER: <image>\nYou are an intelligent") and text.endswith("ASSISTANT:")
    from unirag.generators.base import GenerationOptions

    outs = gen.generate_batch([prompt.messages, prompt.messages], GenerationOptions(max_tokens=4))
    assert len(outs) == 2 and len(outs[0].text) == 4 and outs[0].text.isalpha()  # 4 letter tokens decoded
    assert outs[0].text == outs[1].text  # same prompt, greedy: same answer in a batch
    assert outs[0].usage.output_tokens == 4
    assert outs[0].usage.input_images == 1 and outs[0].usage.input_tokens > 16  # image tokens were expanded


def test_unknown_model_is_a_config_error(tmp_path):
    gen = load_generator(f"hf:{tmp_path / 'nope'}", device="cpu")
    with pytest.raises(ConfigError, match="cannot load VLM"):
        gen.generate([])
    with pytest.raises(ConfigError, match="unknown dtype"):
        load_generator("hf:x", dtype="int3")


def test_bfloat16_weights_and_inputs_then_close(coco_set, llava_path, monkeypatch):
    """Weights load directly in bfloat16, pixel values are cast to it (a float32 image into bf16 weights fails),
    and close() drops the model and empties the GPU cache."""
    import torch

    from unirag.generators.base import GenerationOptions
    from unirag.prompts.caption import build_caption_prompt, caption_template

    gen = load_generator(f"hf:{llava_path}", batch_size=2, device="cpu", dtype="bfloat16")
    gen._load()
    assert (str(gen._device), gen._torch_dtype) == ("cpu", torch.bfloat16)
    assert {p.dtype for p in gen._model.parameters()} == {torch.bfloat16}
    img = coco_set["images_root"] / coco_set["rows"][0]["image"]
    prompt = build_caption_prompt(caption_template("llava"), img, [])
    outs = gen.generate_batch([prompt.messages], GenerationOptions(max_tokens=3))
    assert len(outs) == 1 and outs[0].usage.input_images == 1
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append(1))
    gen.close()
    assert gen._model is None and calls == [1]


def test_auto_device_is_cpu_in_float32_without_a_gpu(llava_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    gen = load_generator(f"hf:{llava_path}")
    gen._load()
    assert (str(gen._device), gen._torch_dtype) == ("cpu", torch.float32)
    gen.close()


def test_a_bug_inside_generate_stops_the_run_with_its_traceback(coco_set, llava_path, tmp_path, monkeypatch):
    """A RuntimeError from the model is a bug, not a failed query: it propagates and nothing is recorded."""
    from transformers import LlavaForConditionalGeneration

    def broken_generate(self, **kwargs):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (bug)")

    monkeypatch.setattr(LlavaForConditionalGeneration, "generate", broken_generate)
    out = tmp_path / "run"
    cfg = CaptionConfig(queries=coco_set["queries"], generator=f"hf:{llava_path}", out=out, mode="rag", k=2,
                        images_root=coco_set["images_root"], retrieval=coco_set["run"], limit=2, max_tokens=5,
                        generator_options={"batch_size": 2, "device": "cpu", "dtype": "float32"}, progress=False)
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        run_captioning(cfg)
    outputs = out / "outputs.jsonl"
    assert not outputs.exists() or outputs.read_text().strip() == ""


def test_llava_sends_no_sampling_arguments_without_a_temperature(llava_path):
    """castorini/UniRAG src/unirag/caption_generation_inference.py at commit 294f843a, infer_llava: the call is
    ``model.generate(**inputs, max_new_tokens=max_output_tokens)`` (:258), so the checkpoint's generation
    config decides how to sample (``temperature = none``, the official profile); unirag's default 0.0 is
    greedy decoding, said explicitly (``do_sample=False``)."""
    from unirag.generators.base import GenerationOptions
    from unirag.messages import Message, TextPart

    gen = load_generator(f"hf:{llava_path}", device="cpu", dtype="float32")
    gen._load()
    seen = []
    real = gen._model.generate

    def spy(**kwargs):
        seen.append({k: v for k, v in kwargs.items() if k in ("max_new_tokens", "do_sample", "temperature")})
        return real(**kwargs)

    gen._model.generate = spy
    msg = [Message("user", [TextPart("a cat")])]
    gen.generate(msg, GenerationOptions(max_tokens=3, temperature=None))
    gen.generate(msg, GenerationOptions(max_tokens=3))
    gen.generate(msg, GenerationOptions(max_tokens=3, temperature=0.7))
    assert seen == [{"max_new_tokens": 3}, {"max_new_tokens": 3, "do_sample": False},
                    {"max_new_tokens": 3, "do_sample": True, "temperature": 0.7}]


@pytest.mark.slow  # tens of seconds on 2 cores: left out of make test-fast
def test_decode_workers_decode_the_next_batches_images_and_change_no_caption(coco_set, llava_path, tmp_path,
                                                                              decoded_here):
    """With decode workers the query and example images are decoded in the workers, batches ahead of the
    model (the run's own process decodes no image file), and every record is what inline decoding gives."""
    records = {}
    for workers in (0, 2):
        out = tmp_path / f"run{workers}"
        decoded_here.clear()
        cfg = CaptionConfig(queries=coco_set["queries"], generator=f"hf:{llava_path}", out=out, mode="rag", k=2,
                            images_root=coco_set["images_root"], retrieval=coco_set["run"], limit=5, max_tokens=5,
                            generator_options={"batch_size": 2, "device": "cpu", "dtype": "float32"},
                            progress=False, save_prompts=0, engine=EngineOptions(decode_workers=workers))
        assert run_captioning(cfg)["counts"]["ok"] == 5
        recs = [json.loads(x) for x in (out / "outputs.jsonl").read_text().splitlines()]
        records[workers] = sorted(({k: r[k] for k in ("qid", "caption", "examples", "usage")} for r in recs),
                                  key=lambda r: r["qid"])
        if workers == 0:
            assert len(decoded_here) == 5 * 3  # each query's image and its two examples', here
        else:
            assert decoded_here == []
    assert records[2] == records[0]
