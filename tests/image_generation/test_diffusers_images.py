"""diffusers backend: a tiny random Stable Diffusion pipeline loaded from disk like a real checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from unirag.data.mbeir import read_queries
from unirag.errors import BackendError, ConfigError
from unirag.generators.images.base import ImageRequest
from unirag.generators.images.diffusers_backend import (
    STYLE_INTERLEAVED,
    STYLE_TEXT_ONLY,
    call_kwargs,
)
from unirag.generators.registry import IMAGE, load_generator
from unirag.pipelines.image_gen import ImageConfig, image_stem, run_images
from unirag.retrieval.results import Pair

from .helpers import read_pixels

SMALL = dict(width=32, height=32, steps=2, guidance=4.0, image_seed=1234)


@pytest.fixture(scope="module")
def tiny_sd(tiny_sd_dir):
    gen = load_generator(f"diffusers:{tiny_sd_dir}", IMAGE, device="cpu")
    yield gen
    gen.close()


def _request(seed: int, caption: str = "A man riding a motorcycle down a road.") -> ImageRequest:
    return ImageRequest(qid="q1", caption=caption, width=32, height=32, steps=2, guidance=4.0, seed=seed)


def test_loads_local_pipeline_dir_as_text_only(tiny_sd, tiny_sd_dir):
    assert tiny_sd.spec == f"diffusers:{tiny_sd_dir}"
    assert tiny_sd.style == STYLE_TEXT_ONLY
    assert tiny_sd.config()["pipeline"] == "StableDiffusionPipeline"
    assert tiny_sd.local is True


def test_same_seed_same_pixels_different_seed_differs(tiny_sd):
    a = np.asarray(tiny_sd.generate(_request(1234)).image)
    b = np.asarray(tiny_sd.generate(_request(1234)).image)
    c = np.asarray(tiny_sd.generate(_request(4321)).image)
    assert a.shape == (32, 32, 3)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


def test_text_only_pipeline_refuses_examples(tiny_sd, t2i_data):
    with pytest.raises(ConfigError, match="text-only"):
        tiny_sd.check_k(1)
    req = _request(1)
    req.examples = [Pair.of(t2i_data.root / t2i_data.records[0]["image"], "a caption", "img:1")]
    with pytest.raises(ConfigError, match="does not accept reference images"):  # runs check_k before: above
        tiny_sd.generate(req)


def test_run_writes_lossless_pngs_with_prompts_and_manifest(tiny_sd, t2i_data, tmp_path):
    queries = read_queries(t2i_data.queries)[:3]
    out = tmp_path / "run"
    counts = run_images(ImageConfig(queries=queries, generator=tiny_sd.spec, out=out, **SMALL,
                                    progress=False), tiny_sd)
    assert counts["ok"] == 3 and counts["total_ok"] == 3 and counts["error"] == 0
    lines = [json.loads(x) for x in (out / "outputs.jsonl").read_text().splitlines()]
    assert [r["qid"] for r in lines] == [q.qid for q in queries]
    for q, rec in zip(queries, lines, strict=True):
        assert rec["status"] == "ok" and rec["error"] is None and rec["examples"] == []
        assert rec["image"] == f"images/{image_stem(q.qid)}.png"
        assert rec["size"] == [32, 32] and rec["latency_s"] >= 0
        assert rec["cost_usd"] == 0.0 and rec["usage"] == {}  # local models are free
        sidecar = json.loads((out / "images" / f"{image_stem(q.qid)}.prompt.json").read_text())
        assert sidecar["prompt"] == q.txt and sidecar["seed"] == 1234 and sidecar["steps"] == 2
    # Lossless: regenerating the first query with the same seed gives exactly the saved pixels.
    again = tiny_sd.generate(ImageRequest(qid=queries[0].qid, caption=queries[0].txt, width=32, height=32, steps=2,
                                          guidance=4.0, seed=1234))
    assert np.array_equal(read_pixels(out / lines[0]["image"]), np.asarray(again.image))
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["counts"]["ok"] == 3
    assert manifest["identity"]["generator"] == tiny_sd.spec and manifest["identity"]["seed"] == 1234
    assert set(manifest["identity"]["templates"]) >= {"image_zeroshot", "image_fewshot_omnigen"}
    assert (out / "prompts" / f"000_{queries[0].qid.replace(':', '_')}.txt").read_text().strip().endswith(queries[0].txt)


def test_non_multiple_of_8_size_is_config_error(tiny_sd):
    with pytest.raises(ConfigError, match="multiple of 8"):
        tiny_sd.check_size(30, 32)


def test_omnigen_style_prompt_and_input_images_in_example_order(tmp_path):
    examples = [Pair.of(Path("/imgs/a.jpg"), "A red bus.", "img:a"),
                Pair.of(Path("/imgs/b.jpg"), "Two dogs on grass.", "img:b")]
    req = ImageRequest(qid="q", caption="A cat on a sofa.", examples=examples)
    gen = load_generator("diffusers:omnigen-like", IMAGE, pipeline=OmniGenLike(), device="cpu")
    prompt = gen.prompt_text(req)
    # Each example's caption precedes its placeholder; placeholders numbered 1..k in order; query last.
    i_a, i_1 = prompt.index("A red bus."), prompt.index("<img><|image_1|></img>")
    i_b, i_2 = prompt.index("Two dogs on grass."), prompt.index("<img><|image_2|></img>")
    assert i_a < i_1 < i_b < i_2 < prompt.index("A cat on a sofa.")
    assert "<|image_3|>" not in prompt
    assert gen.prompt_text(ImageRequest(qid="q", caption="A cat on a sofa.")) == "A cat on a sofa."


def test_call_kwargs_pass_only_declared_parameters():
    omnigen_params = {"prompt", "input_images", "height", "width", "num_inference_steps", "guidance_scale",
                      "generator", "output_type", "img_guidance_scale"}
    assert load_generator("diffusers:omnigen-like", IMAGE, pipeline=OmniGenLike(), device="cpu").style == STYLE_INTERLEAVED
    req = ImageRequest(qid="q", caption="c", width=64, height=48, steps=3, guidance=2.5, seed=7)
    kwargs, dropped = call_kwargs(omnigen_params, req, "p", ["IMG1", "IMG2"], "GEN")
    assert kwargs == {"prompt": "p", "height": 48, "width": 64, "num_inference_steps": 3, "guidance_scale": 2.5,
                      "generator": "GEN", "output_type": "pil", "input_images": ["IMG1", "IMG2"]}
    assert dropped == []
    no_guidance = {"prompt", "height", "width", "num_inference_steps", "generator"}
    kwargs, dropped = call_kwargs(no_guidance, req, "p", [], "GEN")
    assert "guidance_scale" not in kwargs and dropped == ["guidance_scale"]
    with pytest.raises(ConfigError, match="reference images"):
        call_kwargs(no_guidance, req, "p", ["IMG"], "GEN")


class OmniGenLike:
    """A pipeline object with OmniGen's call signature (the real one needs torchvision, absent here).

    Records each call; raises torch.OutOfMemoryError when given more than ``oom_above`` images.
    """

    def __init__(self, oom_above: int | None = None) -> None:
        self.calls: list[dict] = []
        self.oom_above = oom_above

    def __call__(self, prompt, input_images=None, height=None, width=None, num_inference_steps=None,
                 guidance_scale=None, generator=None, output_type="pil"):
        import torch
        from PIL import Image

        self.calls.append(dict(prompt=prompt, input_images=input_images, size=(width, height),
                               seed=generator.initial_seed()))
        if self.oom_above is not None and len(input_images or []) > self.oom_above:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")

        class Out:
            images = [Image.new("RGB", (width, height), (10, 20, 30))]
        return Out()


def _examples(t2i_data, n: int) -> list[Pair]:
    rec = t2i_data.records
    return [Pair.of(t2i_data.root / rec[i]["image"], rec[i]["captions"][1], f"img:{i}") for i in range(1, n + 1)]


def test_interleaved_pipeline_object_receives_prompt_and_images(t2i_data):
    """A pipeline declaring ``input_images`` (OmniGen's signature) gets the decoded example images."""
    pipe = OmniGenLike()
    gen = load_generator("diffusers:omnigen-like", IMAGE, pipeline=pipe, device="cpu")
    gen.check_k(5)  # accepts examples
    rec = t2i_data.records
    ex = _examples(t2i_data, 2)
    out = gen.generate(ImageRequest(qid="q", caption=rec[0]["captions"][0], examples=ex, width=48, height=32, seed=99))
    (seen,) = pipe.calls
    assert seen["size"] == (48, 32) and seen["seed"] == 99
    assert [im.size for im in seen["input_images"]] == [(rec[1]["width"], rec[1]["height"]),
                                                        (rec[2]["width"], rec[2]["height"])]
    assert np.array_equal(np.asarray(seen["input_images"][0]), read_pixels(ex[0].image))
    assert "<img><|image_2|></img>" in seen["prompt"] and out.meta["prompt"] == seen["prompt"]
    assert out.image.size == (48, 32) and "examples_used" not in out.meta
    with pytest.raises(ConfigError, match="multiple of 16"):  # OmniGen packs latents in 2x2 patches
        gen.check_size(40, 32)


def test_out_of_memory_drops_last_examples_then_fails(t2i_data):
    pipe = OmniGenLike(oom_above=3)
    gen = load_generator("diffusers:omnigen-like", IMAGE, pipeline=pipe, device="cpu")
    out = gen.generate(ImageRequest(qid="q", caption="c", examples=_examples(t2i_data, 5), width=32, height=32))
    assert [len(c["input_images"]) for c in pipe.calls] == [5, 4, 3]
    assert out.meta["examples_used"] == 3
    assert "<|image_3|>" in out.meta["prompt"] and "<|image_4|>" not in out.meta["prompt"]
    assert t2i_data.records[3]["captions"][1] in out.meta["prompt"]
    assert t2i_data.records[4]["captions"][1] not in out.meta["prompt"]
    strict = load_generator("diffusers:omnigen-like", IMAGE, pipeline=OmniGenLike(oom_above=0), device="cpu",
                                  oom_fallback=False)
    with pytest.raises(BackendError, match="out of memory for query q") as e:
        strict.generate(ImageRequest(qid="q", caption="c", examples=_examples(t2i_data, 2), width=32, height=32))
    assert not e.value.retryable


def test_bad_diffusers_specs_are_config_errors(tmp_path):
    (tmp_path / "not-a-pipeline").mkdir()
    with pytest.raises(ConfigError, match="model_index.json"):
        load_generator(f"diffusers:{tmp_path / 'not-a-pipeline'}", IMAGE, device="cpu")
    with pytest.raises(ConfigError, match="does not exist"):
        load_generator(f"diffusers:{tmp_path / 'missing'}", IMAGE, device="cpu")
    with pytest.raises(ConfigError, match="lacks a name"):
        load_generator("diffusers:", IMAGE)
    with pytest.raises(ConfigError, match="unknown image generator spec"):
        load_generator("stable-diffusion:foo", IMAGE)


@pytest.mark.slow  # tens of seconds on 2 cores: left out of make test-fast
def test_cli_with_local_pipeline_passes_picture_settings(tiny_sd, tiny_sd_dir, t2i_data, tmp_path):
    from click.testing import CliRunner

    from unirag.cli.generate_images_cmd import generate_images

    out = tmp_path / "cli"
    args = ["--queries", str(t2i_data.queries), "--generator", f"diffusers:{tiny_sd_dir}", "--device", "cpu",
            "--width", "40", "--height", "32", "--steps", "2", "--guidance", "3.0", "--set", "image_seed=5", "--limit", "2",
            "--out", str(out), "--no-progress"]
    result = CliRunner().invoke(generate_images, args)
    assert result.exit_code == 0, result.output
    recs = [json.loads(x) for x in (out / "outputs.jsonl").read_text().splitlines()]
    assert len(recs) == 2 and all(r["size"] == [40, 32] for r in recs)
    identity = json.loads((out / "manifest.json").read_text())["identity"]
    assert (identity["width"], identity["height"], identity["steps"], identity["guidance"], identity["seed"]) == (
        40, 32, 2, 3.0, 5)
    assert identity["dtype"] == "float32"
    first = read_queries(t2i_data.queries)[0]
    again = tiny_sd.generate(ImageRequest(qid=first.qid, caption=first.txt, width=40, height=32, steps=2,
                                          guidance=3.0, seed=5))
    assert np.array_equal(read_pixels(out / recs[0]["image"]), np.asarray(again.image))
    bad = CliRunner().invoke(generate_images, [*args[:-5], "--mode", "rag", "--retrieval", str(t2i_data.run),
                                               "--out", str(tmp_path / "rag")])
    assert isinstance(bad.exception, ConfigError) and "text-only" in str(bad.exception)


def test_batch_of_text_only_requests_gives_each_its_own_seeded_picture(tiny_sd):
    reqs = [_request(1234, "A man riding a motorcycle down a road."), _request(4321, "Two dogs on the grass."),
            _request(1234, "A man riding a motorcycle down a road.")]
    batch = tiny_sd.generate_batch(reqs)
    assert len(batch) == 3 and all(b.image.size == (32, 32) for b in batch)
    pixels = [np.asarray(b.image).astype(int) for b in batch]
    assert np.array_equal(pixels[0], pixels[2])  # same caption and seed -> same picture, wherever in the batch
    assert not np.array_equal(pixels[0], pixels[1])
    alone = np.asarray(tiny_sd.generate(reqs[1]).image).astype(int)
    assert np.abs(alone - pixels[1]).mean() < 2.0  # batched convolution may round differently, not more
    assert [b.meta["prompt"] for b in batch] == [r.caption for r in reqs]


class OffloadRecorder(OmniGenLike):
    def __init__(self) -> None:
        super().__init__()
        self.placed: list[tuple[str, str]] = []

    def to(self, device):
        self.placed.append(("to", device))

    def enable_model_cpu_offload(self, device=None):
        self.placed.append(("model-offload", device))


def test_offload_and_auto_precision_on_a_gpu(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    pipe = OffloadRecorder()
    gen = load_generator("diffusers:recorder", IMAGE, pipeline=pipe, offload="model")
    assert gen.device == "cuda" and gen.dtype == "bfloat16" and pipe.placed == [("model-offload", "cuda")]
    assert gen.config()["offload"] == "model"
    plain = OffloadRecorder()
    load_generator("diffusers:recorder", IMAGE, pipeline=plain, device="cuda")
    assert plain.placed == [("to", "cuda")]
    with pytest.raises(ConfigError, match="offload mode"):
        load_generator("diffusers:recorder", IMAGE, pipeline=OffloadRecorder(), offload="disk")
    calls = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append(1))
    gen.close()
    assert calls == [1]
