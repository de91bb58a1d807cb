"""UniIR's BLIP-FF retriever (``uniir:blip_ff:PATH``) in transformers' BLIP classes, without UniIR's or LAVIS's code.

UniIR's ``BLIPFeatureFusion`` (``src/models/uniir_blip/blip_featurefusion/blip_ff.py``) embeds every
input with one forward pass: the BLIP ViT encodes the image and the BERT text encoder (``med.py``,
cross-attention to the image tokens) reads the text; the embedding is the pooler output. Its collator
fills a missing image with an all-zero tensor and a missing text with ``""``; there is no score-level sum.

The checkpoint's ``visual_encoder.*`` / ``text_encoder.*`` tensors become a ``BlipVisionModel``
(``layer_norm_eps=1e-6``) and a ``BlipTextModel`` with cross-attention and pooler, sized from the shapes.
Preprocessing (:class:`unirag.encoders.preprocess.SquareResizeTransform`, ``format_string``, BERT's
tokenizer with BLIP's ``[DEC]``/``[ENC]``, 100 tokens) and the official lines it follows:
docs/encoders-parity.md. Queries get M-BEIR instructions as for CLIP-SF.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from unirag.encoders.base import Encoder, ImageInput
from unirag.encoders.instructions import QueryInstructions, format_string
from unirag.encoders.preprocess import SquareResizeTransform
from unirag.encoders.uniir import UniIRCheckpoint, build_modules, count_blocks, load_tokenizer
from unirag.errors import ConfigError
from unirag.runtime import host_to_device

_VISION_VARIANTS = {768: "base", 1024: "large"}
#: UniIR's ``model.tokenizer_max_length`` for BLIP-FF (its eval ``embed.yaml`` configs).
UNIIR_BLIP_MAX_TEXT_LENGTH = 100


def blip_architecture(sd: dict[str, Any]) -> dict[str, int]:
    """BLIP-FF sizes from the tensor shapes (heads: 64-wide, as BLIP's ViT-B/L and BERT-base)."""
    width = int(sd["visual_encoder.cls_token"].shape[-1])
    patch = int(sd["visual_encoder.patch_embed.proj.weight"].shape[-1])
    grid = round((sd["visual_encoder.pos_embed"].shape[1] - 1) ** 0.5)
    hidden = int(sd["text_encoder.embeddings.word_embeddings.weight"].shape[1])
    return {
        "vision_width": width, "patch_size": patch, "image_size": patch * grid,
        "vision_layers": count_blocks(sd, r"visual_encoder\.blocks\.(\d+)\.attn\.qkv\.weight$"),
        "vision_mlp": int(sd["visual_encoder.blocks.0.mlp.fc1.weight"].shape[0]), "vision_heads": width // 64,
        "vocab_size": int(sd["text_encoder.embeddings.word_embeddings.weight"].shape[0]), "text_width": hidden,
        "text_layers": count_blocks(sd, r"text_encoder\.encoder\.layer\.(\d+)\.attention\.self\.query\.weight$"),
        "text_mlp": int(sd["text_encoder.encoder.layer.0.intermediate.dense.weight"].shape[0]),
        "text_heads": hidden // 64,
        "max_positions": int(sd["text_encoder.embeddings.position_embeddings.weight"].shape[0]),
        "encoder_width": int(sd["text_encoder.encoder.layer.0.crossattention.self.key.weight"].shape[1]),
    }


def convert_vision(sd: dict[str, Any], layers: int) -> dict[str, Any]:
    """BLIP's timm-style ViT names -> ``BlipVisionModel`` names."""
    v = "visual_encoder."
    out = {"embeddings.class_embedding": sd[v + "cls_token"], "embeddings.position_embedding": sd[v + "pos_embed"],
           "embeddings.patch_embedding.weight": sd[v + "patch_embed.proj.weight"],
           "embeddings.patch_embedding.bias": sd[v + "patch_embed.proj.bias"],
           "post_layernorm.weight": sd[v + "norm.weight"], "post_layernorm.bias": sd[v + "norm.bias"]}
    names = {"norm1": "layer_norm1", "attn.qkv": "self_attn.qkv", "attn.proj": "self_attn.projection",
             "norm2": "layer_norm2", "mlp.fc1": "mlp.fc1", "mlp.fc2": "mlp.fc2"}
    for i in range(layers):
        for a, h in names.items():
            for p in ("weight", "bias"):
                out[f"encoder.layers.{i}.{h}.{p}"] = sd[f"{v}blocks.{i}.{a}.{p}"]
    return out


def convert_text(sd: dict[str, Any]) -> dict[str, Any]:
    """``med.py`` BertModel names are ``BlipTextModel``'s (transformers ported that file); drop buffers."""
    return {k.removeprefix("text_encoder."): v for k, v in sd.items()
            if k.startswith("text_encoder.") and not k.endswith("position_ids")}


def build_blip_models(sd: dict[str, Any], arch: dict[str, int], torch_dtype):
    """(``BlipVisionModel``, ``BlipTextModel`` with pooler) holding the converted weights, in ``torch_dtype``."""
    from transformers import BlipTextConfig, BlipTextModel, BlipVisionConfig, BlipVisionModel

    vision_cfg = BlipVisionConfig(hidden_size=arch["vision_width"], intermediate_size=arch["vision_mlp"],
                                  num_hidden_layers=arch["vision_layers"], num_attention_heads=arch["vision_heads"],
                                  image_size=arch["image_size"], patch_size=arch["patch_size"], layer_norm_eps=1e-6,
                                  hidden_act="gelu")
    text_cfg = BlipTextConfig(vocab_size=arch["vocab_size"], hidden_size=arch["text_width"],
                              encoder_hidden_size=arch["encoder_width"], intermediate_size=arch["text_mlp"],
                              num_hidden_layers=arch["text_layers"], num_attention_heads=arch["text_heads"],
                              max_position_embeddings=arch["max_positions"], hidden_act="gelu",
                              layer_norm_eps=1e-12, is_decoder=True)  # is_decoder: build the cross-attention layers
    if min(arch["vision_heads"], arch["text_heads"]) < 1:
        raise ConfigError("BLIP widths below one 64-wide attention head")
    vision, text = build_modules(torch_dtype, lambda: [BlipVisionModel(vision_cfg),
                                                       BlipTextModel(text_cfg, add_pooling_layer=True)],
                                 [convert_vision(sd, arch["vision_layers"]), convert_text(sd)], "UniIR BLIP-FF")
    return vision.eval(), text.eval()


class UniIRBlipFFEncoder(UniIRCheckpoint, Encoder):
    """UniIR BLIP-FF: one fused forward per input (see the module docstring)."""

    fusion = "blip-feature-fusion"

    def __init__(self, spec: str, *, device: str | None = "auto", dtype: str | None = "auto",
                 batch_size: int | None = None, tokenizer: str | None = None,
                 max_text_length: int = UNIIR_BLIP_MAX_TEXT_LENGTH,
                 instructions: str | Path | QueryInstructions | None = None, use_instructions: bool | None = None) -> None:
        variant, sd = self._open(spec, device, dtype, instructions, use_instructions, prefix="",
                                 required=("visual_encoder.cls_token", "text_encoder.embeddings.word_embeddings.weight"),
                                 what="UniIR BLIP-FF")
        self.name = spec
        self.arch = blip_architecture(sd)
        found = _VISION_VARIANTS.get(self.arch["vision_width"], f"ViT-{self.arch['vision_width']}")
        if variant is not None and variant != found:
            raise ConfigError(f"{spec!r} names the {variant} variant but the weights are BLIP {found}")
        self.variant = found
        self.tokenizer = load_tokenizer(tokenizer, self.checkpoint, ("vocab.txt",), "bert-base-uncased",
                                        "BERT tokenizer")
        if "[DEC]" not in self.tokenizer.get_vocab():  # BLIP's init_tokenizer
            self.tokenizer.add_special_tokens({"bos_token": "[DEC]"})
        if "[ENC]" not in self.tokenizer.get_vocab():
            self.tokenizer.add_special_tokens({"additional_special_tokens": ["[ENC]"]})
        if len(self.tokenizer) != self.arch["vocab_size"]:
            raise ConfigError(f"tokenizer has {len(self.tokenizer)} tokens, the checkpoint's text encoder "
                              f"{self.arch['vocab_size']}: not BLIP's tokenizer")
        vision, text = build_blip_models(sd, self.arch, self.torch_dtype)
        del sd
        self.vision, self.text = vision.to(self.device), text.to(self.device)
        self.image_transform = SquareResizeTransform(self.arch["image_size"])
        self.max_text_length = int(max_text_length)
        self.dim = self.arch["text_width"]
        self.batch_size = batch_size or 32

    # -- identity ---------------------------------------------------------------------------------
    def identity(self) -> dict[str, Any]:
        base = {k: v for k, v in super().identity().items() if k != "name"}
        return {**base, "backend": "uniir-blip-ff", "variant": self.variant, "text_format": "uniir-format_string",
                "weights": {"uniir": "blip_ff", "weights_sha256": self.weights_sha256()},
                "max_text_length": self.max_text_length, "text_cleaning": None,
                "image_preprocess": self.image_transform.identity()}

    # -- encoding ---------------------------------------------------------------------------------
    def image_preprocessor(self):
        """BLIP's eval transform for one image (PIL bicubic resize, whatever is installed)."""
        return self.image_transform.single

    def _forward(self, pixels: np.ndarray | None, texts: Sequence[str]) -> np.ndarray:
        """One fused forward pass of stacked pixel values (None: UniIR's collator fills a missing image
        with an all-zero, normalised, tensor) and their texts."""
        import torch

        batch = self.tokenizer([format_string(t) for t in texts], padding="max_length", truncation=True,
                               max_length=self.max_text_length, return_tensors="pt").to(self.device)
        size = self.arch["image_size"]
        pixels = torch.zeros(len(texts), 3, size, size) if pixels is None else pixels
        with torch.inference_mode(), self._autocast():
            image_embeds = self.vision(pixel_values=host_to_device(pixels, self.device, self.torch_dtype)
                                       ).last_hidden_state
            image_atts = torch.ones(image_embeds.shape[:-1], dtype=torch.long, device=self.device)
            out = self.text(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                            encoder_hidden_states=image_embeds, encoder_attention_mask=image_atts)
        return out.pooler_output.float().cpu().numpy()

    def _embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        return self._forward(None, texts)

    def _embed_preprocessed(self, batch: np.ndarray) -> np.ndarray:
        return self._forward(batch, [""] * len(batch))

    def encode_fused(self, images: Sequence[ImageInput], texts: Sequence[str], progress: bool = False) -> np.ndarray:
        """Feature fusion: the image and its text in one forward pass (no score-level sum)."""
        if len(images) != len(texts):
            raise ValueError(f"fused encoding needs as many images as texts ({len(images)} != {len(texts)})")
        pairs = list(zip(images, texts, strict=True))
        decode = self._decoder(list(images))
        return self._batched(lambda b: self._forward(self.pixels(decode([p[0] for p in b])), [p[1] for p in b]),
                             pairs, progress, "encode image+text")

    def close(self) -> None:
        self.vision = self.text = None
        super().close()  # the GPU memory
