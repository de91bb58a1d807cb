"""OpenAI CLIP's forward pass (openai/CLIP ``clip/model.py``: ``VisionTransformer``, ``encode_text``) written
with torch functions on a raw OpenAI-layout state dict: the reference the CLIP-SF tests compare with."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F


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


def normalise(x):
    x = np.asarray(x, np.float64)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)
