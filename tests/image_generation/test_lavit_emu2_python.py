"""LaVIT, Emu2-Gen and ``python:`` image backends, run through the same generation tests as the others.

The real models need tens of GB and their own code, so each is replaced by a stand-in with the exact
public interface unirag calls: LaVIT's ``models.build_model(...)`` / ``multimodal_synthesis(prompts, ...)``
(github.com/jy0205/LaVIT), Emu2-Gen's diffusers custom pipeline ``pipeline_emu2_gen.py`` with
``__call__(inputs, height, width, num_inference_steps, guidance_scale, crop_info, original_size)`` returning
``.image`` (BAAI/Emu2-Gen), loaded by diffusers from a local folder like the real one. The stand-ins draw
their noise from torch's global generator as the real models do, and mix in what they were given, so
the tests can see the seed and the inputs take effect.
"""

from __future__ import annotations

import json
import shutil
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from unirag.data.mbeir import read_queries
from unirag.errors import ConfigError
from unirag.generators.images.base import ImageRequest
from unirag.generators.images.lavit import xformers_available
from unirag.generators.registry import IMAGE, load_generator
from unirag.pipelines.image_gen import ImageConfig, run_images
from unirag.retrieval.results import Pair

from .helpers import read_pixels

SMALL = dict(width=32, height=32, steps=2, guidance=4.0, image_seed=1234)

# What the stand-ins have in common: noise from torch's global RNG plus a colour from their inputs.
_PICTURE = '''
def _picture(width, height, key):
    import hashlib
    import numpy as np
    import torch
    from PIL import Image
    noise = torch.rand(height, width, 3).numpy()
    tint = np.frombuffer(hashlib.sha256(key.encode()).digest()[:3], dtype=np.uint8) / 255.0
    return Image.fromarray(((0.5 * noise + 0.5 * tint) * 255).astype("uint8"))
'''

LAVIT_MODELS = _PICTURE + '''

CALLS = []


class LaVITforGeneration:
    def __init__(self, model_path, model_dtype):
        self.model_path, self.model_dtype, self.device = model_path, model_dtype, "cpu"

    def to(self, device):
        self.device = device
        return self

    def multimodal_synthesis(self, prompts, width=512, height=512, original_size=None, crops_coords_top_left=None,
                             use_nucleus_sampling=True, top_p=1.0, top_k=200, num_beams=1, temperature=1,
                             num_return_images=1, length_penalty=1, max_length=200, min_length=20,
                             num_inference_steps=50, guidance_scale_for_llm=5.0, guidance_scale_for_decoder=3.0,
                             uncond_input_ids=None):
        for content, kind in prompts:
            assert kind in ("image", "text"), "The prompt type should be image or text"
        CALLS.append(dict(prompts=list(prompts), width=width, height=height, top_k=top_k,
                          steps=num_inference_steps, guidance=guidance_scale_for_llm, n=num_return_images))
        return [_picture(width, height, repr(prompts))]


BUILT = []


def build_model(model_path="./", model_dtype="bf16", device_id=None, image_size=224, use_xformers=False,
                understanding=True, load_tokenizer=True, pixel_decoding="highres", check_safety=True,
                local_files_only=False):
    BUILT.append(dict(model_path=model_path, model_dtype=model_dtype, understanding=understanding,
                      load_tokenizer=load_tokenizer, local_files_only=local_files_only, check_safety=check_safety,
                      use_xformers=use_xformers))
    return LaVITforGeneration(model_path, model_dtype)
'''

EMU2_PIPELINE = _PICTURE + '''

from dataclasses import dataclass
from typing import List, Optional

from diffusers import DiffusionPipeline
from diffusers.utils import BaseOutput
from PIL import Image


@dataclass
class EmuVisualGenerationPipelineOutput(BaseOutput):
    image: Image.Image
    nsfw_content_detected: Optional[bool]


class EmuVisualGenerationPipeline(DiffusionPipeline):
    def __init__(self, scheduler, multimodal_encoder, tokenizer):
        super().__init__()
        self.register_modules(scheduler=scheduler, multimodal_encoder=multimodal_encoder, tokenizer=tokenizer)
        self.calls = []

    def __call__(self, inputs, height=1024, width=1024, num_inference_steps=50, guidance_scale=3.0,
                 crop_info=[0, 0], original_size=[1024, 1024]):
        if not isinstance(inputs, list):
            inputs = [inputs]
        key = "|".join(x if isinstance(x, str) else f"image{x.size}" for x in inputs)
        self.calls.append(dict(inputs=list(inputs), size=(width, height), steps=num_inference_steps,
                               guidance=guidance_scale))
        return EmuVisualGenerationPipelineOutput(image=_picture(width, height, key), nsfw_content_detected=None)
'''

PLUGIN = _PICTURE + '''

from unirag.generators.images.base import GeneratedImage


class Painter:
    local = True

    def __init__(self, device):
        self.device = device
        self.requests = []

    def generate(self, request):
        import torch
        torch.manual_seed(request.seed)
        self.requests.append(request)
        key = request.caption + "|" + "|".join(e.caption for e in request.examples)
        return GeneratedImage(image=_picture(request.width, request.height, key), meta={"painter": self.device})


def make(device="cpu"):
    return Painter(device)
'''


@pytest.fixture(scope="module")
def lavit_code(tmp_path_factory):
    root = tmp_path_factory.mktemp("lavit-code")
    (root / "models").mkdir()
    (root / "models" / "__init__.py").write_text(LAVIT_MODELS)
    ckpt = tmp_path_factory.mktemp("lavit-ckpt")
    yield root, ckpt
    sys.modules.pop("models", None)
    if str(root) in sys.path:
        sys.path.remove(str(root))


def make_emu2_dir(out, variant=None):
    """A folder laid out as BAAI/Emu2-Gen: ``model_index.json``, the custom pipeline file, a scheduler, and the
    two components Emu2's README loads by hand: ``multimodal_encoder/`` (a tiny causal LM standing in for
    Emu2's remote-code encoder) and ``tokenizer/``."""
    import torch
    from diffusers import DDIMScheduler
    from transformers import LlamaConfig, LlamaForCausalLM

    from tiny_models import tiny_clip_tokenizer

    DDIMScheduler().save_pretrained(out / "scheduler")
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=300, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=2)).save_pretrained(
        out / "multimodal_encoder", variant=variant)
    tiny_clip_tokenizer().save_pretrained(out / "tokenizer")
    (out / "model_index.json").write_text(json.dumps({
        "_class_name": "EmuVisualGenerationPipeline", "_diffusers_version": "0.25.0",
        # diffusers cannot build these two itself (as with the real remote-code encoder): they must be passed
        "scheduler": ["diffusers", "DDIMScheduler"], "multimodal_encoder": [None, None], "tokenizer": [None, None]}))
    (out / "pipeline_emu2_gen.py").write_text(textwrap.dedent(EMU2_PIPELINE))
    return out


@pytest.fixture(scope="module")
def emu2_dir(tmp_path_factory):
    return make_emu2_dir(tmp_path_factory.mktemp("emu2") / "Emu2-Gen")


@pytest.fixture(scope="module")
def plugin_module(tmp_path_factory):
    root = tmp_path_factory.mktemp("plugin")
    (root / "unirag_test_painter.py").write_text(PLUGIN)
    sys.path.insert(0, str(root))
    yield "unirag_test_painter"
    sys.modules.pop("unirag_test_painter", None)
    sys.path.remove(str(root))


@pytest.fixture(params=["lavit", "emu2-gen", "python"])
def backend(request, lavit_code, emu2_dir, plugin_module):
    if request.param == "lavit":
        code, ckpt = lavit_code
        gen = load_generator(f"lavit:{ckpt}", IMAGE, lavit_code=str(code), device="cpu")
    elif request.param == "emu2-gen":
        gen = load_generator(f"emu2-gen:{emu2_dir}", IMAGE, device="cpu")
    else:
        gen = load_generator(f"python:{plugin_module}:make", IMAGE, device="cpu")
    yield request.param, gen
    gen.close()


def _seen(name, gen) -> list:
    """What the model was called with, per call, as (kind, value) items in order."""
    if name == "lavit":
        import models

        return [[(kind, c) for c, kind in call["prompts"]] for call in models.CALLS]
    if name == "emu2-gen":
        return [[("text", x) if isinstance(x, str) else ("image", x.size) for x in call["inputs"]]
                for call in gen._pipe.calls]
    return [[("text", r.caption)] for r in gen.inner.requests]


def test_zero_shot_run_writes_deterministic_lossless_pictures(backend, t2i_data, tmp_path):
    name, gen = backend
    queries = read_queries(t2i_data.queries)[:3]
    out = tmp_path / "run"
    counts = run_images(ImageConfig(queries=queries, generator=gen.spec, out=out, **SMALL, progress=False), gen)
    assert counts["ok"] == 3 and counts["error"] == 0
    recs = [json.loads(x) for x in (out / "outputs.jsonl").read_text().splitlines()]
    assert [r["qid"] for r in recs] == [q.qid for q in queries]
    assert all(r["status"] == "ok" and r["size"] == [32, 32] and r["cost_usd"] == 0.0 for r in recs)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["identity"]["generator"] == gen.spec
    if name == "lavit":  # seeded once when built, as the official code does: test_lavit_is_seeded_once_when_built
        return
    # The same request (seed 1234) gives exactly the saved pixels again; another seed other pixels.
    req = ImageRequest(qid=queries[0].qid, caption=queries[0].txt, width=32, height=32, steps=2, guidance=4.0,
                       seed=1234)
    again = np.asarray(gen.generate(req).image)
    assert np.array_equal(read_pixels(out / recs[0]["image"]), again)
    req.seed = 4321
    assert not np.array_equal(np.asarray(gen.generate(req).image), again)


def test_rag_run_gives_the_model_the_example_pairs_interleaved(backend, t2i_data, tmp_path):
    """castorini/UniRAG src/unirag/image_generation_inference.py at commit 916425f8: LaVIT gets
    ``(txt, "text"), (img_path, "image")`` per example, then ``(caption, "text")`` (lines 62-65); Emu2-Gen
    gets ``txt, PIL image`` per example (the file opened and copied), then the caption (lines 131-137)."""
    name, gen = backend
    queries = read_queries(t2i_data.queries)[:2]
    before = len(_seen(name, gen))
    counts = run_images(ImageConfig(queries=queries, generator=gen.spec, out=tmp_path / "rag", mode="rag", k=1,
                                    retrieval=t2i_data.run, pool_images_root=t2i_data.root, **SMALL,
                                    progress=False), gen)
    assert counts["ok"] == 2
    calls = _seen(name, gen)[before:]
    assert len(calls) == 2
    nxt = t2i_data.records[1]  # the fixture's run retrieves the next query's image with its caption
    if name == "python":  # the plugin gets the request itself
        req = gen.inner.requests[-2]
        assert [e.caption for e in req.examples] == [nxt["captions"][1]]
        assert req.examples[0].image == t2i_data.root / nxt["image"]
        return
    # UniRAG's order: each example's caption, then its image, then the query caption.
    kinds = [k for k, _ in calls[0]]
    assert kinds == ["text", "image", "text"]
    assert calls[0][0][1] == nxt["captions"][1] and calls[0][2][1] == queries[0].txt
    image = calls[0][1][1]
    if name == "lavit":
        assert image == str(t2i_data.root / nxt["image"])  # LaVIT takes image paths
    else:
        assert image == (nxt["width"], nxt["height"])  # Emu2-Gen takes decoded PIL images
    # The saved prompt shows that order too, each image by its file name.
    rec = json.loads((tmp_path / "rag" / "outputs.jsonl").read_text().splitlines()[0])
    saved = json.loads((tmp_path / "rag" / rec["image"]).with_suffix(".prompt.json").read_text())["prompt"]
    assert saved == f"{nxt['captions'][1]}\n<image {Path(nxt['image']).name}>\n{queries[0].txt}"


def test_settings_reach_the_model(lavit_code, emu2_dir):
    """UniRAG builds LaVIT with ``model_dtype="bf16", check_safety=False, use_xformers=True,
    understanding=False, load_tokenizer=True`` (castorini/UniRAG ``src/unirag/image_generation_inference.py``
    at commit 916425f8, lines 37-45; unirag adds ``local_files_only=True``: offline, and uses xformers only
    when installed) and calls ``multimodal_synthesis(prompts, width=, height=, guidance_scale_for_llm=,
    num_return_images=1, num_inference_steps=, top_k=50)`` (lines 70-78)."""
    import models

    code, ckpt = lavit_code
    lavit = load_generator(f"lavit:{ckpt}", IMAGE, lavit_code=str(code), device="cpu", dtype="bfloat16")
    assert models.BUILT[-1] == {"model_path": str(ckpt), "model_dtype": "bf16", "understanding": False,
                                "load_tokenizer": True, "local_files_only": True, "check_safety": False,
                                "use_xformers": xformers_available()}
    lavit.generate(ImageRequest(qid="q", caption="a red bus", width=48, height=32, steps=3, guidance=2.5))
    assert {k: models.CALLS[-1][k] for k in ("width", "height", "steps", "guidance", "top_k", "n")} == \
        {"width": 48, "height": 32, "steps": 3, "guidance": 2.5, "top_k": 50, "n": 1}
    emu = load_generator(f"emu2-gen:{emu2_dir}", IMAGE, device="cpu")
    emu.generate(ImageRequest(qid="q", caption="a red bus", width=48, height=32, steps=3, guidance=2.5))
    assert {k: emu._pipe.calls[-1][k] for k in ("size", "steps", "guidance")} == \
        {"size": (48, 32), "steps": 3, "guidance": 2.5}
    assert type(emu._pipe).__name__ == "EmuVisualGenerationPipeline"


def test_missing_code_or_wrong_interfaces_are_config_errors(tmp_path, lavit_code, t2i_data):
    code, ckpt = lavit_code
    with pytest.raises(ConfigError, match="does not exist"):
        load_generator(f"lavit:{tmp_path / 'nope'}", IMAGE, lavit_code=str(code), device="cpu")
    with pytest.raises(ConfigError, match="cannot import LaVIT"):
        load_generator(f"lavit:{ckpt}", IMAGE, lavit_module="no_such_lavit_pkg", device="cpu")

    class NotLaVIT:
        def multimodal_synthesis(self, prompts):
            return []

    with pytest.raises(ConfigError, match="lacks width"):
        load_generator("lavit:x", IMAGE, model=NotLaVIT(), device="cpu")

    class NotEmu:
        def __call__(self, prompt, height=None, width=None):
            return None

    with pytest.raises(ConfigError, match="not Emu2-Gen's pipeline"):
        load_generator("emu2-gen:x", IMAGE, pipeline=NotEmu(), device="cpu")
    with pytest.raises(ConfigError, match="python:MODULE:FACTORY"):
        load_generator("python:just_a_module", IMAGE, device="cpu")
    with pytest.raises(ConfigError, match="cannot import module"):
        load_generator("python:no_such_mod_xyz:make", IMAGE)
    with pytest.raises(ConfigError, match="no generate"):
        load_generator("python:os:getcwd", IMAGE)  # returns a str, which has no generate()


def test_out_of_memory_at_five_examples_keeps_the_first_four(emu2_dir, t2i_data):
    """The paper: Emu2-Gen ran out of GPU memory for 36 five-shot prompts, which then kept the first four pairs."""
    import torch

    emu = load_generator(f"emu2-gen:{emu2_dir}", IMAGE, device="cpu")
    real_call = type(emu._pipe).__call__

    def tight(self, inputs, **kw):
        if sum(not isinstance(x, str) for x in inputs) > 4:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real_call(self, inputs, **kw)

    type(emu._pipe).__call__ = tight
    try:
        rec = t2i_data.records
        ex = [Pair.of(t2i_data.root / rec[i]["image"], rec[i]["captions"][1]) for i in range(1, 6)]
        out = emu.generate(ImageRequest(qid="q", caption="c", examples=ex, width=32, height=32))
    finally:
        type(emu._pipe).__call__ = real_call
    assert out.meta["examples_used"] == 4
    assert rec[4]["captions"][1] in out.meta["prompt"] and rec[5]["captions"][1] not in out.meta["prompt"]


def test_python_caption_plugin(tmp_path, monkeypatch):
    from unirag.generators.base import Generation
    from unirag.generators.registry import load_generator
    from unirag.messages import Message, TextPart

    (tmp_path / "unirag_test_captioner.py").write_text(textwrap.dedent('''
        from unirag.generators.base import Generation

        class Echo:
            image_mode = "single-image"
            template_family = "llava"

            def __init__(self, prefix):
                self.prefix = prefix

            def generate(self, messages, options=None):
                return Generation(text=self.prefix + messages[-1].parts[-1].text)

        def make(prefix="says: ", **_):
            return Echo(prefix)
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    gen = load_generator("python:unirag_test_captioner:make", device="cpu")
    assert gen.image_mode == "single-image" and gen.template_family == "llava"
    msg = [Message(role="user", parts=[TextPart("a cat")])]
    assert gen.generate_batch([msg, msg]) == [Generation(text="says: a cat"), Generation(text="says: a cat")]
    assert gen.config()["backend"] == "python" and gen.spec == "python:unirag_test_captioner:make"


# -- loading and seeding as the official code does ----------------------------------------------------------------
def test_emu2_pipeline_gets_its_encoder_and_tokenizer_passed_explicitly(tmp_path, monkeypatch):
    """Emu2's README (baaivision/Emu ``Emu2/README.md`` at commit 0e642ce1, "Emu2-Gen", lines 326-356) and
    UniRAG's ``infer_emu2`` (castorini/UniRAG ``src/unirag/image_generation_inference.py`` at commit
    916425f8, lines 101-124) load ``<path>/multimodal_encoder`` with ``AutoModelForCausalLM.from_pretrained(...,
    trust_remote_code=True, torch_dtype=torch.bfloat16, use_safetensors=True, variant="bf16")`` (README
    339-345, UniRAG 107-113) and ``<path>/tokenizer`` with ``AutoTokenizer`` (README 346, UniRAG 114), and
    pass both to ``DiffusionPipeline.from_pretrained(path, custom_pipeline="pipeline_emu2_gen", ...,
    multimodal_encoder=, tokenizer=)`` (README 348-356, UniRAG 116-124). unirag also passes
    ``trust_remote_code=True`` to the pipeline call, which neither official call does: recent diffusers
    releases ask for it before running a custom pipeline's code."""
    from diffusers import DiffusionPipeline
    from transformers import LlamaForCausalLM

    folder = make_emu2_dir(tmp_path / "Emu2-Gen", variant="bf16")
    seen = {}
    real = DiffusionPipeline.from_pretrained.__func__

    def spy(cls, path, **kwargs):
        seen.update(kwargs, path=path)
        return real(cls, path, **kwargs)

    monkeypatch.setattr(DiffusionPipeline, "from_pretrained", classmethod(spy))
    emu = load_generator(f"emu2-gen:{folder}", IMAGE, device="cpu", dtype="bfloat16")
    assert seen["custom_pipeline"] == "pipeline_emu2_gen" and seen["trust_remote_code"] is True
    assert seen["variant"] == "bf16" and seen["use_safetensors"] is True
    encoder, tokenizer = seen["multimodal_encoder"], seen["tokenizer"]
    assert isinstance(encoder, LlamaForCausalLM) and encoder.dtype == torch.bfloat16
    assert Path(encoder.config._name_or_path).name == "multimodal_encoder"
    assert Path(tokenizer.name_or_path).name == "tokenizer"
    # The pipeline holds those very objects (diffusers could not have built them: model_index says null).
    assert emu._pipe.multimodal_encoder is encoder and emu._pipe.tokenizer is tokenizer
    out = emu.generate(ImageRequest(qid="q", caption="a red bus", width=16, height=16, steps=1))
    assert out.image.size == (16, 16)


def test_emu2_checkpoint_without_its_components_is_a_config_error(tmp_path):
    folder = make_emu2_dir(tmp_path / "Emu2-Gen")
    shutil.rmtree(folder / "tokenizer")
    with pytest.raises(ConfigError, match="no tokenizer sub-folder"):
        load_generator(f"emu2-gen:{folder}", IMAGE, device="cpu")
    with pytest.raises(ConfigError, match="not in the local Hugging Face cache"):
        load_generator("emu2-gen:nobody/no-such-emu2", IMAGE, device="cpu")


def test_lavit_is_seeded_once_when_built(lavit_code):
    """UniRAG's ``build_lavit_model`` (castorini/UniRAG ``src/unirag/image_generation_inference.py`` at
    commit 916425f8, lines 23-48) sets ``seed = 1234`` in torch, numpy and ``random`` (lines 27-30) once
    before ``build_model`` (line 38); ``infer_lavit`` (lines 51-98) never seeds again, so consecutive calls
    draw on from where the previous one left off."""
    import random

    code, ckpt = lavit_code
    req = ImageRequest(qid="q", caption="a red bus", width=16, height=16, steps=1, seed=77)
    load_generator(f"lavit:{ckpt}", IMAGE, lavit_code=str(code), device="cpu")
    assert torch.initial_seed() == 1234
    assert np.random.rand() == np.random.RandomState(1234).rand()
    assert random.random() == random.Random(1234).random()
    first = load_generator(f"lavit:{ckpt}", IMAGE, lavit_code=str(code), device="cpu")
    a1 = np.asarray(first.generate(req).image)
    a2 = np.asarray(first.generate(req).image)
    assert not np.array_equal(a1, a2)  # no reseeding before a call
    req.seed = 4321  # the request's seed is not LaVIT's: same first picture after a fresh build
    again = load_generator(f"lavit:{ckpt}", IMAGE, lavit_code=str(code), device="cpu")
    assert np.array_equal(np.asarray(again.generate(req).image), a1)
    other = load_generator(f"lavit:{ckpt}", IMAGE, lavit_code=str(code), device="cpu", seed=5)
    assert not np.array_equal(np.asarray(other.generate(req).image), a1)
    assert first.config()["seed"] == 1234 and first.identity()["seeding"] == "once-at-build"


def test_lavit_precision_names_are_lavits(lavit_code):
    """LaVIT's ``build_model`` takes ``model_dtype`` "bf16" or "fp16" (jy0205/LaVIT ``LaVIT/models/__init__.py``
    at commit 16fb6076, docstring line 23, converted at lines 51-54; ``LaVIT/models/lavit_for_generation.py``
    at commit 1b2212c0 loads ``torch.bfloat16 if model_dtype=="bf16" else torch.float16`` (lines 72, 107,
    110) and its ``dtype`` property falls back to fp16 for any other name (lines 139-148), so any other name
    silently means fp16). UniRAG passes "bf16" (``image_generation_inference.py`` at commit 916425f8, line 37)."""
    import models

    code, ckpt = lavit_code
    load_generator(f"lavit:{ckpt}", IMAGE, lavit_code=str(code), device="cpu")
    assert models.BUILT[-1]["model_dtype"] == "bf16"  # "auto": the official precision, on any device
    load_generator(f"lavit:{ckpt}", IMAGE, lavit_code=str(code), device="cpu", dtype="bf16")
    assert models.BUILT[-1]["model_dtype"] == "bf16"
    for bad in ("float32", "fp32"):
        with pytest.raises(ConfigError, match="bfloat16 or float16 only"):
            load_generator(f"lavit:{ckpt}", IMAGE, lavit_code=str(code), device="cpu", dtype=bad)
    with pytest.raises(ConfigError, match="float16 is not supported for CPU"):
        load_generator(f"lavit:{ckpt}", IMAGE, lavit_code=str(code), device="cpu", dtype="float16")


def test_lavit_uses_xformers_when_installed(lavit_code, monkeypatch):
    """UniRAG builds LaVIT with ``use_xformers=True`` (castorini/UniRAG ``src/unirag/image_generation_inference.py``
    at commit 916425f8, line 42); unirag does when the package is importable, and a user can still switch it
    off. (With xformers missing, official LaVIT raises instead: jy0205/LaVIT
    ``LaVIT/models/lavit_for_generation.py`` at commit 1b2212c0, lines 112-123.)"""
    import models

    import unirag.generators.images.lavit as lavit_mod

    code, ckpt = lavit_code
    for installed in (True, False):
        monkeypatch.setattr(lavit_mod, "xformers_available", lambda installed=installed: installed)
        gen = load_generator(f"lavit:{ckpt}", IMAGE, lavit_code=str(code), device="cpu")
        assert models.BUILT[-1]["use_xformers"] is installed and gen.config()["use_xformers"] is installed
    monkeypatch.setattr(lavit_mod, "xformers_available", lambda: True)
    load_generator(f"lavit:{ckpt}", IMAGE, lavit_code=str(code), device="cpu", use_xformers=False)
    assert models.BUILT[-1]["use_xformers"] is False



def test_official_lavit_is_seeded_again_before_every_1000th_query(lavit_code):
    """The official script generates 1,000 queries per process (castorini/UniRAG scripts/image_generation.sh
    @e9a4e00:3 ``bs=1000``, one ``--index i_(i+1000)`` call per batch, :19-21) and every process builds LaVIT
    through ``build_lavit_model``, which seeds 1234 first (src/unirag/image_generation_inference.py@e9a4e00
    :27-30): the generators restart at 1234 before query 0, 1000, 2000, ... (``image_seeding = official``)."""
    from unirag.generators.registry import IMAGE, profile_options

    assert profile_options("lavit:/ckpt", "official", kind=IMAGE) == {"reseed_every": 1000}
    assert profile_options("lavit:/ckpt", "default", kind=IMAGE) == {}
    code, ckpt = lavit_code
    req = ImageRequest(qid="q", caption="a red bus", width=16, height=16, steps=1)
    every3 = load_generator(f"lavit:{ckpt}", IMAGE, lavit_code=str(code), device="cpu", reseed_every=3)
    pictures = [np.asarray(every3.generate(req).image) for _ in range(4)]
    assert np.array_equal(pictures[3], pictures[0]) and not np.array_equal(pictures[1], pictures[0])
    assert every3.identity()["seeding"] == "every-3-calls"
    once = load_generator(f"lavit:{ckpt}", IMAGE, lavit_code=str(code), device="cpu")
    pictures = [np.asarray(once.generate(req).image) for _ in range(4)]
    assert not np.array_equal(pictures[3], pictures[0])  # unirag's default: seeded once, at build


def test_official_emu2_is_never_seeded(tmp_path):
    """UniRAG's ``infer_emu2`` (castorini/UniRAG src/unirag/image_generation_inference.py@e9a4e00:100-148) sets
    no seed: only ``build_lavit_model`` seeds (:27-30), and the Emu2 path never calls it, so the pipeline draws
    from torch's unseeded generator and consecutive queries get different starting noise. unirag's default
    seeds the request's seed before every call (one picture reproducible alone)."""
    from unirag.generators.registry import IMAGE, profile_options

    assert profile_options("emu2-gen:/ckpt", "official", kind=IMAGE) == {"reseed": False}
    folder = make_emu2_dir(tmp_path / "Emu2-Gen", variant="bf16")
    req = ImageRequest(qid="q", caption="a red bus", width=16, height=16, steps=1, seed=7)
    seeded = load_generator(f"emu2-gen:{folder}", IMAGE, device="cpu", dtype="bfloat16")
    assert np.array_equal(np.asarray(seeded.generate(req).image), np.asarray(seeded.generate(req).image))
    never = load_generator(f"emu2-gen:{folder}", IMAGE, device="cpu", dtype="bfloat16",
                                 **profile_options(f"emu2-gen:{folder}", "official", kind=IMAGE))
    torch.manual_seed(0)
    a = np.asarray(never.generate(req).image)
    b = np.asarray(never.generate(req).image)
    assert not np.array_equal(a, b) and never.config()["seeding"] == "never"
