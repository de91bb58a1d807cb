"""References the CLIP tests compare unirag with, written for the tests from OpenAI's code (openai/CLIP):
its image transform (``clip/clip.py`` ``_transform``, lines 58-65 at commit 0848ed71, in PIL/numpy), its
forward pass (``clip/model.py``: ``VisionTransformer``, ``encode_text``) with torch functions on a raw
OpenAI-layout state dict, and its tokenizer (``clip/simple_tokenizer.py`` at commit 2558ec83: ``basic_clean``
lines 50-53, ``whitespace_clean`` lines 56-59, ``SimpleTokenizer.bpe``/``encode``; ``clip/clip.py``
``tokenize``: start token, BPE ids, end token, zero padding to 77) over the real BPE committed in
tests/fixtures/clip-bpe. The forward pass and the truncation follow openai/CLIP as published on PyPI
(``openai-clip`` 1.0.1, read from its sdist): ``clip/model.py`` ``VisionTransformer.forward`` lines 224-241,
``CLIP.encode_text`` lines 344-357; ``clip/clip.py`` ``tokenize`` with ``truncate=True`` (a text over 77
tokens keeps its first 76 and ends with the end token), lines 228-234. The stored git versions of
``clip/clip.py`` (0848ed71, 3bee2811) predate that branch."""

from __future__ import annotations

import html

import ftfy
import numpy as np
import regex
import torch
import torch.nn.functional as F

from tiny_models import _byte_unicode_map, clip_bpe_merges, clip_bpe_vocab

SOT, EOT = 49406, 49407


def _ln(x, sd, p):
    return F.layer_norm(x, x.shape[-1:], sd[p + ".weight"], sd[p + ".bias"], eps=1e-5)


def _block(x, sd, p, heads, mask):
    """ResidualAttentionBlock: x + attn(ln_1(x)); x + mlp(ln_2(x)); sequence-first [L, N, D]."""
    d = x.shape[-1]
    h = _ln(x, sd, p + "ln_1")
    attn, _ = F.multi_head_attention_forward(
        h, h, h, d, heads, sd[p + "attn.in_proj_weight"], sd[p + "attn.in_proj_bias"], None, None, False, 0.0,
        sd[p + "attn.out_proj.weight"], sd[p + "attn.out_proj.bias"], training=False, need_weights=False,
        attn_mask=mask)
    x = x + attn
    h = _ln(x, sd, p + "ln_2")
    h = F.linear(h, sd[p + "mlp.c_fc.weight"], sd[p + "mlp.c_fc.bias"])
    h = h * torch.sigmoid(1.702 * h)  # QuickGELU
    return x + F.linear(h, sd[p + "mlp.c_proj.weight"], sd[p + "mlp.c_proj.bias"])


def _layers(sd, prefix):
    return len({k.split(".")[len(prefix.split(".")) - 1] for k in sd if k.startswith(prefix)})


def ref_encode_image(sd, pixels):
    w = sd["visual.conv1.weight"]
    x = F.conv2d(pixels, w, stride=w.shape[-1])  # [N, W, g, g]
    x = x.reshape(x.shape[0], x.shape[1], -1).permute(0, 2, 1)
    cls = sd["visual.class_embedding"].expand(x.shape[0], 1, -1)
    x = torch.cat([cls, x], dim=1) + sd["visual.positional_embedding"]
    x = _ln(x, sd, "visual.ln_pre").permute(1, 0, 2)
    for i in range(_layers(sd, "visual.transformer.resblocks.")):
        x = _block(x, sd, f"visual.transformer.resblocks.{i}.", w.shape[0] // 64, None)
    x = _ln(x.permute(1, 0, 2)[:, 0, :], sd, "visual.ln_post")
    return x @ sd["visual.proj"]


def ref_encode_text(sd, tokens):
    """OpenAI: zero-padded tokens, causal mask, features at the argmax token (the EOT, highest id)."""
    n = tokens.shape[1]
    x = sd["token_embedding.weight"][tokens] + sd["positional_embedding"][:n]
    mask = torch.full((n, n), float("-inf"), dtype=x.dtype).triu(1)
    x = x.permute(1, 0, 2)
    width = x.shape[-1]
    for i in range(_layers(sd, "transformer.resblocks.")):
        x = _block(x, sd, f"transformer.resblocks.{i}.", width // 64, mask)
    x = _ln(x.permute(1, 0, 2), sd, "ln_final")
    return x[torch.arange(x.shape[0]), tokens.argmax(dim=-1)] @ sd["text_projection"]


def openai_pixels(image, n_px: int) -> np.ndarray:
    """OpenAI CLIP's ``_transform(n_px)`` (openai/CLIP ``clip/clip.py``, ``_transform``: lines 58-65 at commit
    0848ed71; ``Resize(n_px, interpolation=BICUBIC)``, ``CenterCrop(n_px)``, RGB, ``ToTensor()``, ``Normalize``
    with CLIP's mean/std) redone here with PIL and numpy, step by step as torchvision runs it on a PIL image:
    ``Resize(int)`` scales the shorter side to ``n_px`` and the longer to ``int(n_px * long / short)`` with
    ``PIL.Image.resize(BICUBIC)``; ``CenterCrop`` cuts at ``int(round((size - n_px) / 2.0))``
    (torchvision 0.20.1 as published on PyPI, ``torchvision/transforms/functional.py`` ``center_crop``
    (line 556), the offset at line 592: ``int(round((image_height - crop_height) / 2.0))``, Python's round)."""
    from PIL import Image

    w, h = image.size
    scale = n_px / min(w, h)
    new = (n_px, int(n_px * h / w)) if w <= h else (int(n_px * w / h), n_px)
    assert abs(new[0] - w * scale) < 1.001 and abs(new[1] - h * scale) < 1.001
    resized = image.resize(new, Image.BICUBIC)
    left = int(round((new[0] - n_px) / 2.0))
    top = int(round((new[1] - n_px) / 2.0))
    rgb = resized.crop((left, top, left + n_px, top + n_px)).convert("RGB")
    x = np.asarray(rgb, dtype=np.float32) / np.float32(255)
    mean = np.array([0.48145466, 0.4578275, 0.40821073], dtype=np.float32)
    std = np.array([0.26862954, 0.26130258, 0.27577711], dtype=np.float32)
    return ((x - mean) / std).transpose(2, 0, 1)


def normalise(x):
    x = np.asarray(x, np.float64)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


class OpenAIReferenceTokenizer:
    """OpenAI CLIP's tokenizer (see the module docstring), re-implemented for the test."""

    PATTERN = regex.compile(r"<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]"
                            r"|[^\s\p{L}\p{N}]+", regex.IGNORECASE)

    def __init__(self) -> None:
        merges = clip_bpe_merges()
        self.rank = {pair: i for i, pair in enumerate(merges)}
        self.ids = clip_bpe_vocab(merges)
        self.byte_char = _byte_unicode_map()

    @staticmethod
    def clean(text: str) -> str:
        text = html.unescape(html.unescape(ftfy.fix_text(text))).strip()
        return regex.sub(r"\s+", " ", text).strip().lower()

    def _bpe(self, word: str) -> list[str]:
        parts = [*word[:-1], word[-1] + "</w>"]
        while len(parts) > 1:
            pairs = {(parts[i], parts[i + 1]) for i in range(len(parts) - 1)}
            best = min(pairs, key=lambda p: self.rank.get(p, float("inf")))
            if best not in self.rank:
                break
            merged, i = [], 0
            while i < len(parts):
                if i + 1 < len(parts) and (parts[i], parts[i + 1]) == best:
                    merged.append(parts[i] + parts[i + 1])
                    i += 2
                else:
                    merged.append(parts[i])
                    i += 1
            parts = merged
        return parts

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        for piece in self.PATTERN.findall(self.clean(text)):
            mapped = "".join(self.byte_char[b] for b in piece.encode("utf-8"))
            out += [self.ids[t] for t in self._bpe(mapped)]
        return out

    def tokenize(self, text: str, context: int = 77) -> list[int]:
        ids = [SOT, *self.encode(text), EOT]
        if len(ids) > context:
            ids = ids[:context]
            ids[-1] = EOT
        return ids
