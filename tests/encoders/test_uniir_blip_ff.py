"""UniIR BLIP-FF: a tiny checkpoint in UniIR's key layout, loaded through ``uniir:blip_ff:``, must give the
embeddings of a reference forward pass written here from BLIP's code (timm ViT + ``med.py`` BERT with
cross-attention, pooler output, as ``BLIPFeatureFusion.encode_multimodal_input``)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tiny_models import tiny_uniir_blip_ff
from unirag.data.records import Modality, Query
from unirag.encoders.instructions import format_string
from unirag.encoders.registry import load_encoder
from unirag.errors import ConfigError

FIXTURE_TSV = Path(__file__).resolve().parents[1] / "fixtures" / "mbeir" / "query_instructions.tsv"


def _lin(x, sd, p):
    return F.linear(x, sd[p + ".weight"], sd[p + ".bias"])


def _ln(x, sd, p, eps):
    return F.layer_norm(x, x.shape[-1:], sd[p + ".weight"], sd[p + ".bias"], eps=eps)


def _attend(q, k, v, heads, mask=None):
    b, n, d = q.shape
    hd = d // heads

    def split(t):
        return t.view(b, -1, heads, hd).transpose(1, 2)

    scores = split(q) @ split(k).transpose(-1, -2) / math.sqrt(hd)
    if mask is not None:  # [b, keys]: 1 keep, 0 drop
        scores = scores + (1.0 - mask[:, None, None, :].to(scores.dtype)) * -1e9
    return (scores.softmax(-1) @ split(v)).transpose(1, 2).reshape(b, n, d)


def ref_vit(sd, pixels):
    """BLIP's VisionTransformer.forward: patch embed, [CLS] + positions, pre-norm blocks, final norm (eps 1e-6)."""
    v = "visual_encoder."
    w = sd[v + "patch_embed.proj.weight"]
    x = F.conv2d(pixels, w, sd[v + "patch_embed.proj.bias"], stride=w.shape[-1]).flatten(2).transpose(1, 2)
    x = torch.cat([sd[v + "cls_token"].expand(x.shape[0], -1, -1), x], dim=1) + sd[v + "pos_embed"]
    d = x.shape[-1]
    i = 0
    while f"{v}blocks.{i}.attn.qkv.weight" in sd:
        b = f"{v}blocks.{i}."
        h = _ln(x, sd, b + "norm1", 1e-6)
        q, k, val = _lin(h, sd, b + "attn.qkv").split(d, dim=-1)
        x = x + _lin(_attend(q, k, val, d // 64), sd, b + "attn.proj")
        x = x + _lin(F.gelu(_lin(_ln(x, sd, b + "norm2", 1e-6), sd, b + "mlp.fc1")), sd, b + "mlp.fc2")
        i += 1
    return _ln(x, sd, v + "norm", 1e-6)


def ref_bert(sd, ids, mask, image_embeds):
    """med.py BertModel (multimodal mode): embeddings without token types, post-norm layers with self- then
    cross-attention, pooler tanh(dense([CLS]))."""
    t = "text_encoder."
    x = sd[t + "embeddings.word_embeddings.weight"][ids] + sd[t + "embeddings.position_embeddings.weight"][: ids.shape[1]]
    x = _ln(x, sd, t + "embeddings.LayerNorm", 1e-12)
    heads = x.shape[-1] // 64
    i = 0
    while f"{t}encoder.layer.{i}.attention.self.query.weight" in sd:
        b = f"{t}encoder.layer.{i}."
        for att, kv, m in (("attention", x, mask), ("crossattention", image_embeds, None)):
            ctx = _attend(_lin(x, sd, b + att + ".self.query"), _lin(kv, sd, b + att + ".self.key"),
                          _lin(kv, sd, b + att + ".self.value"), heads, m)
            x = _ln(_lin(ctx, sd, b + att + ".output.dense") + x, sd, b + att + ".output.LayerNorm", 1e-12)
        h = _lin(F.gelu(_lin(x, sd, b + "intermediate.dense")), sd, b + "output.dense")
        x = _ln(h + x, sd, b + "output.LayerNorm", 1e-12)
        i += 1
    return torch.tanh(_lin(x[:, 0], sd, t + "pooler.dense"))


def _normalise(x):
    x = np.asarray(x, np.float64)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


@pytest.fixture(scope="module")
def ckpt() -> Path:
    return tiny_uniir_blip_ff()


@pytest.fixture(scope="module")
def raw_sd(ckpt):
    sd = torch.load(ckpt, map_location="cpu", weights_only=True)["model"]
    return {k: v.double() if v.is_floating_point() else v for k, v in sd.items()}


@pytest.fixture(scope="module")
def encoder(ckpt):
    return load_encoder(f"uniir:blip_ff:{ckpt}", device="cpu", dtype="float32", use_instructions=False)


@pytest.fixture(scope="module")
def photos(coco_mini: Path) -> list[Path]:
    rows = [json.loads(line) for line in (coco_mini / "captions.jsonl").read_text().splitlines()[:3]]
    return [coco_mini / r["image"] for r in rows]


def blip_eval_pixels(image, size: int) -> np.ndarray:
    """BLIP's eval transform as UniIR builds it (TIGER-AI-Lab/UniIR
    ``src/models/uniir_blip/backbone/transform/blip_transform.py`` at commit 5035a493,
    ``get_blip_transform(is_train=False)``, lines 41-48: ``Resize((size, size), BICUBIC)``, ``ToTensor()``,
    ``Normalize`` with CLIP's mean/std (line 9); asked for by ``blip_featurefusion/blip_ff.py`` at commit
    669475c4 line 68 with ``is_train=self.training``, False in eval), redone with PIL and numpy:
    torchvision's ``Resize`` of a PIL image is ``PIL.Image.resize`` with that filter."""
    from PIL import Image

    x = np.asarray(image.resize((size, size), Image.BICUBIC), dtype=np.float64) / 255.0
    mean = np.array([0.48145466, 0.4578275, 0.40821073])
    std = np.array([0.26862954, 0.26130258, 0.27577711])
    return ((x - mean) / std).transpose(2, 0, 1)


def _reference(encoder, raw_sd, images, texts):
    from PIL import Image

    tok = encoder.tokenizer([format_string(t) for t in texts], padding="max_length", truncation=True,
                            max_length=encoder.max_text_length, return_tensors="pt")
    if images is None:  # UniIR's collator pads a missing image with zeros (after normalisation):
        # src/data/mbeir_dataset.py at commit 1017242a, lines 391-393 and 399-400
        pixels = torch.zeros(len(texts), 3, 32, 32, dtype=torch.float64)
    else:
        pixels = torch.from_numpy(np.stack([blip_eval_pixels(Image.open(p).convert("RGB"), 32) for p in images]))
    return ref_bert(raw_sd, tok["input_ids"], tok["attention_mask"], ref_vit(raw_sd, pixels)).numpy()


def test_converted_checkpoint_reproduces_blip_ff_forward(encoder, raw_sd, photos):
    texts = ["A man with a red bus on the street.", "Two dogs.", "a kitchen"]
    np.testing.assert_allclose(encoder.encode_texts(texts), _normalise(_reference(encoder, raw_sd, None, texts)),
                               atol=1e-4)
    np.testing.assert_allclose(encoder.encode_images(photos),
                               _normalise(_reference(encoder, raw_sd, photos, [""] * 3)), atol=1e-4)
    fused = encoder.encode_fused(photos, texts)
    np.testing.assert_allclose(fused, _normalise(_reference(encoder, raw_sd, photos, texts)), atol=1e-4)
    # feature fusion: not a sum of the separate embeddings
    separate = _normalise(encoder.encode_images(photos) + encoder.encode_texts(texts))
    assert np.abs(fused - separate).max() > 1e-3


def test_sizes_fingerprint_and_errors(encoder, ckpt, tmp_path):
    assert encoder.dim == 64 and encoder.arch["image_size"] == 32 and encoder.config()["backend"] == "uniir-blip-ff"
    copy = tmp_path / "copy"
    shutil.copytree(ckpt.parent, copy)
    moved = load_encoder(f"uniir:blip_ff:{copy / ckpt.name}", device="cpu", dtype="bfloat16", use_instructions=False)
    assert moved.fingerprint() == encoder.fingerprint()
    assert moved.fingerprint() != load_encoder(f"uniir:blip_ff:{tiny_uniir_blip_ff(seed=1)}", device="cpu").fingerprint()
    with pytest.raises(ConfigError, match="large variant"):
        load_encoder(f"uniir:blip_ff:large:{ckpt}", device="cpu")
    clip_like = tmp_path / "x.pth"
    torch.save({"model": {"clip_model.visual.conv1.weight": torch.zeros(1)}}, clip_like)
    with pytest.raises(ConfigError, match="not a UniIR BLIP-FF checkpoint"):
        load_encoder(f"uniir:blip_ff:{clip_like}", device="cpu")


def test_queries_get_instructions_and_are_encoded_fused(ckpt, photos, coco_mini):
    enc = load_encoder(f"uniir:blip_ff:{ckpt}", device="cpu", instructions=str(FIXTURE_TSV))
    rel = str(photos[0].relative_to(coco_mini))
    q = Query(qid="9:6", modality=Modality.IMAGE, img_path=rel, task_id=3)
    prompt = enc.instructions().instruction_for(q)
    np.testing.assert_allclose(enc.encode_records([q], coco_mini)[0], enc.encode_fused([photos[0]], [prompt])[0],
                               atol=1e-5)


def test_texts_are_cut_at_uniirs_100_tokens(encoder, ckpt):
    """UniIR's BLIP-FF tokenizer: ``padding="max_length", truncation=True, max_length=tokenizer_max_length``
    (TIGER-AI-Lab/UniIR ``src/models/uniir_blip/blip_featurefusion/blip_ff.py`` at commit 669475c4,
    ``get_tokenizer``, lines 70-80) with ``tokenizer_max_length: 100``
    (``blip_featurefusion/configs_scripts/large/eval/unirag/embed.yaml`` at commit c62880ba, line 98)."""
    assert encoder.max_text_length == 100 and encoder.identity()["max_text_length"] == 100
    ids = encoder.tokenizer(["a " * 150], padding="max_length", truncation=True, max_length=encoder.max_text_length)
    assert len(ids["input_ids"][0]) == 100
    # Words past the 98th (after [CLS]) never reach the model; earlier ones do.
    head = "a " * 100
    same = encoder.encode_texts([head + "dog " * 20, head + "bus " * 20])
    np.testing.assert_allclose(same[0], same[1], atol=1e-6)
    differ = encoder.encode_texts(["a " * 90 + "dog " * 20, "a " * 90 + "bus " * 20])
    assert np.abs(differ[0] - differ[1]).max() > 1e-3
    from unirag.encoders.uniir import UniIRBlipFFEncoder

    longer = UniIRBlipFFEncoder(f"uniir:blip_ff:{ckpt}", device="cpu", dtype="float32", use_instructions=False)
    longer.max_text_length = 128
    assert longer.fingerprint() != encoder.fingerprint()


def test_images_go_through_a_pil_bicubic_resize(encoder, photos, monkeypatch):
    """BLIP's eval transform (TIGER-AI-Lab/UniIR ``src/models/uniir_blip/backbone/transform/blip_transform.py``
    at commit 5035a493, line 44: ``transforms.Resize((image_size, image_size),
    interpolation=InterpolationMode.BICUBIC)`` on the PIL image) runs as PIL's bicubic resize whatever is
    installed: unirag calls ``PIL.Image.resize`` itself (no image processor that could pick a torchvision
    backend)."""
    from PIL import Image

    from unirag.encoders.preprocess import SquareResizeTransform

    assert isinstance(encoder.image_transform, SquareResizeTransform)
    assert encoder.identity()["image_preprocess"]["resize"] == "pil-bicubic"
    calls = []
    real = Image.Image.resize

    def spy(self, size, resample=None, *args, **kwargs):
        calls.append((tuple(size), resample))
        return real(self, size, resample, *args, **kwargs)

    monkeypatch.setattr(Image.Image, "resize", spy)
    pils = [Image.open(p).convert("RGB") for p in photos]
    encoder.encode_images(pils)
    assert calls == [((32, 32), Image.Resampling.BICUBIC)] * len(pils)

