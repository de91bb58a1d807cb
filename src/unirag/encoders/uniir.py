"""UniIR's CLIP-SF and BLIP-FF retrievers (two of the paper's) from their released checkpoints, without UniIR's code.

``uniir:clip_sf[:large|:base]:PATH`` loads the ``CLIPScoreFusion`` state dict UniIR saves (OpenAI CLIP
under ``clip_model.``), converts it to a Hugging Face ``CLIPModel`` and runs it through the CLIP-family
backend. The architecture is read from the tensor shapes as OpenAI's ``clip.model.build_model`` does, so
the variant in the spec is only checked. No ``clip``/``open_clip`` package, no torchvision.

As UniIR does: image+text inputs are the sum of the *raw* embeddings, texts go through ``format_string``,
and queries get M-BEIR's query instructions (:mod:`unirag.encoders.instructions`) unless switched off.
Preprocessing and the official lines it follows: docs/encoders-parity.md. BLIP-FF
(:class:`UniIRBlipFFEncoder`) shares :class:`UniIRCheckpoint` and the weight loading.

BLIP-FF (``uniir:blip_ff:PATH``) runs in transformers' BLIP classes, without UniIR's or LAVIS's code.

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

import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from unirag.data.records import Candidate, Query
from unirag.encoders.base import Encoder, ImageInput
from unirag.encoders.hf_clip import HFClipEncoder
from unirag.encoders.instructions import QueryInstructions, format_string
from unirag.encoders.preprocess import OpenAIClipTransform, SquareResizeTransform
from unirag.errors import ConfigError
from unirag.runtime import check_model_spec, hf_from_pretrained, host_to_device, weights_digest

#: UniIR's checkpoints: clip_sf_base = ViT-B/32, clip_sf_large = ViT-L/14.
VARIANTS = {"base": ("ViT-B/32", "openai/clip-vit-base-patch32"), "large": ("ViT-L/14", "openai/clip-vit-large-patch14")}
_ARCH_NAMES = {(768, 32): "ViT-B/32", (768, 16): "ViT-B/16", (1024, 14): "ViT-L/14"}
MODELS = ("clip_sf", "blip_ff")
_TOKENIZER_FILES = ("vocab.json", "tokenizer.json", "tokenizer_config.json")


def read_state_dict(path: Path, prefix: str = "clip_model.", required: tuple[str, ...] = ("visual.conv1.weight",
                    "text_projection"), what: str = "UniIR CLIP-SF") -> dict[str, Any]:
    """The tensors of a UniIR checkpoint under ``prefix`` (prefix and any DDP ``module.`` removed)."""
    import torch

    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - pickle/zip errors have many types; all mean "not a checkpoint"
        raise ConfigError(f"cannot read UniIR checkpoint {path}: {type(e).__name__}: {e}") from None
    sd = obj.get("model", obj) if isinstance(obj, dict) else None
    if not isinstance(sd, dict):
        raise ConfigError(f"{path} holds no state dict (expected {{'model': state_dict}} or a state dict)")
    bare = ((k.removeprefix("module."), v) for k, v in sd.items())
    out = {k.removeprefix(prefix): v for k, v in bare if k.startswith(prefix)}
    if any(r not in out for r in required):
        raise ConfigError(f"{path} is not a {what} checkpoint: no {', '.join(required)} under {prefix!r} "
                          f"(first keys: {list(sd)[:3]})")
    return out


def count_blocks(sd: dict[str, Any], pattern: str) -> int:
    """How many numbered blocks the keys matching ``pattern`` (one ``(\\d+)`` group) name."""
    return len({m.group(1) for k in sd if (m := re.match(pattern, k))})


def architecture(sd: dict[str, Any]) -> dict[str, int]:
    """The OpenAI CLIP hyper-parameters the tensor shapes imply (as ``clip.model.build_model`` reads them)."""
    width = int(sd["visual.conv1.weight"].shape[0])
    patch = int(sd["visual.conv1.weight"].shape[-1])
    grid = round((sd["visual.positional_embedding"].shape[0] - 1) ** 0.5)
    text_width = int(sd["ln_final.weight"].shape[0])
    blocks = r"transformer\.resblocks\.(\d+)\.attn\.in_proj_weight$"
    return {"vision_width": width, "vision_layers": count_blocks(sd, r"visual\." + blocks),
            "patch_size": patch, "image_size": patch * grid, "embed_dim": int(sd["text_projection"].shape[1]),
            "context_length": int(sd["positional_embedding"].shape[0]),
            "vocab_size": int(sd["token_embedding.weight"].shape[0]),
            "text_width": text_width, "text_layers": count_blocks(sd, blocks),
            "vision_heads": width // 64, "text_heads": text_width // 64}


def _block_keys(src: str, dst: str, sd: dict[str, Any], out: dict[str, Any]) -> None:
    """One residual attention block: OpenAI (fused in_proj, c_fc/c_proj) -> HF (q/k/v_proj, fc1/fc2)."""
    w, b = sd[f"{src}attn.in_proj_weight"], sd[f"{src}attn.in_proj_bias"]
    for name, wi, bi in zip(("q_proj", "k_proj", "v_proj"), w.chunk(3, dim=0), b.chunk(3, dim=0), strict=True):
        out[f"{dst}self_attn.{name}.weight"], out[f"{dst}self_attn.{name}.bias"] = wi, bi
    pairs = {"attn.out_proj": "self_attn.out_proj", "ln_1": "layer_norm1", "ln_2": "layer_norm2",
             "mlp.c_fc": "mlp.fc1", "mlp.c_proj": "mlp.fc2"}
    for a, h in pairs.items():
        out[f"{dst}{h}.weight"], out[f"{dst}{h}.bias"] = sd[f"{src}{a}.weight"], sd[f"{src}{a}.bias"]


def convert_state_dict(sd: dict[str, Any], arch: dict[str, int]) -> dict[str, Any]:
    """OpenAI CLIP tensor names -> Hugging Face ``CLIPModel`` ones (projections transposed: OpenAI
    computes ``x @ proj``, HF ``Linear(x) = x @ W.T``)."""
    out: dict[str, Any] = {
        "vision_model.embeddings.class_embedding": sd["visual.class_embedding"],
        "vision_model.embeddings.patch_embedding.weight": sd["visual.conv1.weight"],
        "vision_model.embeddings.position_embedding.weight": sd["visual.positional_embedding"],
        "vision_model.pre_layrnorm.weight": sd["visual.ln_pre.weight"],
        "vision_model.pre_layrnorm.bias": sd["visual.ln_pre.bias"],
        "vision_model.post_layernorm.weight": sd["visual.ln_post.weight"],
        "vision_model.post_layernorm.bias": sd["visual.ln_post.bias"],
        "visual_projection.weight": sd["visual.proj"].t().contiguous(),
        "text_model.embeddings.token_embedding.weight": sd["token_embedding.weight"],
        "text_model.embeddings.position_embedding.weight": sd["positional_embedding"],
        "text_model.final_layer_norm.weight": sd["ln_final.weight"],
        "text_model.final_layer_norm.bias": sd["ln_final.bias"],
        "text_projection.weight": sd["text_projection"].t().contiguous(),
    }
    if "logit_scale" in sd:
        out["logit_scale"] = sd["logit_scale"]
    for i in range(arch["vision_layers"]):
        _block_keys(f"visual.transformer.resblocks.{i}.", f"vision_model.encoder.layers.{i}.", sd, out)
    for i in range(arch["text_layers"]):
        _block_keys(f"transformer.resblocks.{i}.", f"text_model.encoder.layers.{i}.", sd, out)
    return out


def load_tokenizer(tokenizer: str | None, checkpoint: Path, local_files: tuple[str, ...], default: str, what: str):
    """``tokenizer`` (a hub id or directory), else the checkpoint's folder when it holds one of
    ``local_files``, else ``default`` from the local Hugging Face cache."""
    from transformers import AutoTokenizer

    if tokenizer is None:
        local = any((checkpoint.parent / f).is_file() for f in local_files)
        tokenizer = str(checkpoint.parent) if local else default
    return hf_from_pretrained(AutoTokenizer, check_model_spec(tokenizer), what)


def build_modules(torch_dtype, make, weights: Sequence[dict[str, Any]], what: str) -> list[Any]:
    """The modules ``make()`` returns, built directly in ``torch_dtype``, each loaded with its converted
    ``weights`` (cast to ``torch_dtype``); a missing or unexpected tensor is a ConfigError."""
    import torch

    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch_dtype if torch_dtype.is_floating_point else previous)
    try:
        modules = make()
    finally:
        torch.set_default_dtype(previous)
    for module, sd in zip(modules, weights, strict=True):
        cast = {k: v.to(torch_dtype) if v.is_floating_point() else v for k, v in sd.items()}
        missing, unexpected = module.load_state_dict(cast, strict=False)
        missing = [k for k in missing if not k.endswith("position_ids")]
        if missing or unexpected:
            raise ConfigError(f"{what} weights do not fit {type(module).__name__}: missing {missing[:5]}, "
                              f"unexpected {unexpected[:5]}")
    return modules


def build_clip_model(sd: dict[str, Any], arch: dict[str, int], tokenizer, torch_dtype):
    """A Hugging Face ``CLIPModel`` holding the converted weights, built directly in ``torch_dtype``."""
    from transformers import CLIPConfig, CLIPModel

    text = dict(vocab_size=arch["vocab_size"], hidden_size=arch["text_width"], intermediate_size=4 * arch["text_width"],
                num_hidden_layers=arch["text_layers"], num_attention_heads=arch["text_heads"],
                max_position_embeddings=arch["context_length"], hidden_act="quick_gelu",
                bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id)
    vision = dict(hidden_size=arch["vision_width"], intermediate_size=4 * arch["vision_width"],
                  num_hidden_layers=arch["vision_layers"], num_attention_heads=arch["vision_heads"],
                  image_size=arch["image_size"], patch_size=arch["patch_size"], hidden_act="quick_gelu")
    if min(arch["text_heads"], arch["vision_heads"]) < 1:
        raise ConfigError(f"CLIP widths {arch['text_width']}/{arch['vision_width']} are below one 64-wide head")
    config = CLIPConfig(text_config=text, vision_config=vision, projection_dim=arch["embed_dim"])
    return build_modules(torch_dtype, lambda: [CLIPModel(config)], [convert_state_dict(sd, arch)], "UniIR CLIP")[0]


class UniIRCheckpoint:
    """What every UniIR encoder shares: reading its checkpoint file onto a device, UniIR's
    ``format_string`` on texts and M-BEIR query instructions on queries (``use_instructions``,
    ``instructions`` = a ``query_instructions.tsv``)."""

    def __init__(self, spec: str, *, device: str | None = "auto", dtype: str | None = "auto",
                 tokenizer: str | None = None, instructions: str | Path | QueryInstructions | None = None,
                 use_instructions: bool | None = None) -> None:
        """Set the spec (``uniir:clip_sf[:variant]:PATH``), checkpoint, device, precision and instructions, then
        :meth:`_build` the model from the checkpoint with the variant the spec names (or None) and ``tokenizer``."""
        m = re.fullmatch(r"uniir:([a-z_]+):(?:(base|large):)?(.+)", spec.strip(), flags=re.IGNORECASE)
        if not m:
            raise ConfigError(f"UniIR encoder spec {spec!r} should read uniir:MODEL:PATH or uniir:MODEL:large:PATH "
                              f"(MODEL: {', '.join(MODELS)})")
        model, variant, path = m.group(1).lower(), m.group(2), Path(m.group(3)).expanduser()
        if model not in MODELS:
            raise ConfigError(f"{spec!r}: unknown UniIR model {model!r}; supported: {', '.join(MODELS)}")
        if not path.is_file():
            raise ConfigError(f"UniIR checkpoint {str(path)!r} does not exist (spec {spec!r})")
        self.spec = self.name = spec
        self.checkpoint = path.resolve()
        self._place(device, dtype)
        self.use_instructions = use_instructions is not False
        self._instructions_source = instructions
        self._instructions: QueryInstructions | None = (instructions if isinstance(instructions, QueryInstructions)
                                                         else None)
        self._warned = False
        self._build(variant.lower() if variant else None, tokenizer)

    def config(self) -> dict[str, Any]:
        src = self._instructions_source
        return {**super().config(), "checkpoint": str(self.checkpoint), "query_instructions":
                (getattr(src, "source", None) or (str(src) if src else None)) if self.use_instructions else None}

    def instructions(self) -> QueryInstructions:
        if self._instructions is None:
            if self._instructions_source is None:
                raise ConfigError("UniIR encoders prepend M-BEIR query instructions to queries (as UniIR's "
                                  "evaluation does); pass --instructions M-BEIR/instructions/query_instructions.tsv, "
                                  "or --no-instructions")
            self._instructions = QueryInstructions.read(self._instructions_source)
        return self._instructions

    def instruct(self, query: Query) -> Query:
        """``query`` as UniIR encodes it: with its M-BEIR instruction prepended (when instructions are on)."""
        if not self.use_instructions:
            return query
        instructed = self.instructions().apply(query)
        if instructed is None and not self._warned:
            warnings.warn(f"no M-BEIR instruction for query {query.qid!r} (its dataset and task_id name no row of "
                          f"{self.instructions().source}); such queries are encoded without one", stacklevel=2)
            self._warned = True
        return query if instructed is None else instructed

    def encode_records(self, records: Sequence[Candidate | Query], images_root, progress: bool = False) -> np.ndarray:
        records = [self.instruct(r) if isinstance(r, Query) else r for r in records]
        return super().encode_records(records, images_root, progress)


class UniIRClipSFEncoder(UniIRCheckpoint, HFClipEncoder):
    """UniIR CLIP-SF: raw-sum fusion, UniIR text formatting, M-BEIR query instructions."""

    def _build(self, variant: str | None, tokenizer: str | None) -> None:
        sd = read_state_dict(self.checkpoint)
        self.arch = architecture(sd)
        self.arch_name = _ARCH_NAMES.get((self.arch["vision_width"], self.arch["patch_size"]),
                                         f"ViT-{self.arch['vision_width']}/{self.arch['patch_size']}")
        if variant is not None and VARIANTS[variant][0] != self.arch_name:
            raise ConfigError(f"{self.spec!r} names the {variant} variant ({VARIANTS[variant][0]}) but the weights are "
                              f"{self.arch_name}")
        default = VARIANTS[variant or ("base" if self.arch_name == "ViT-B/32" else "large")][1]
        tok = load_tokenizer(tokenizer, self.checkpoint, _TOKENIZER_FILES, default, "CLIP tokenizer")
        model = build_clip_model(sd, self.arch, tok, self.torch_dtype)
        del sd
        self._setup(model, tok, OpenAIClipTransform(self.arch["image_size"]))  # max_position_embeddings: context_length

    # -- identity ---------------------------------------------------------------------------------
    def identity(self) -> dict[str, Any]:
        return {**super().identity(), "backend": "uniir-clip-sf", "text_format": "uniir-format_string", "weights":
                {"uniir": "clip_sf", "arch": self.arch_name, "weights_sha256": weights_digest(self.checkpoint)[:32]}}

    # -- encoding ---------------------------------------------------------------------------------
    def _embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        return super()._embed_texts([format_string(t) for t in texts])


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
    return out | {f"encoder.layers.{i}.{h}.{p}": sd[f"{v}blocks.{i}.{a}.{p}"]
                  for i in range(layers) for a, h in names.items() for p in ("weight", "bias")}


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
    # ``med.py`` BertModel names are ``BlipTextModel``'s (transformers ported that file); buffers dropped
    text_sd = {k.removeprefix("text_encoder."): v for k, v in sd.items()
               if k.startswith("text_encoder.") and not k.endswith("position_ids")}
    vision, text = build_modules(torch_dtype, lambda: [BlipVisionModel(vision_cfg),
                                                       BlipTextModel(text_cfg, add_pooling_layer=True)],
                                 [convert_vision(sd, arch["vision_layers"]), text_sd], "UniIR BLIP-FF")
    return vision.eval(), text.eval()


class UniIRBlipFFEncoder(UniIRCheckpoint, Encoder):
    """UniIR BLIP-FF: one fused forward per input (see the module docstring)."""

    fusion = "blip-feature-fusion"
    max_text_length = UNIIR_BLIP_MAX_TEXT_LENGTH

    def _build(self, variant: str | None, tokenizer: str | None) -> None:
        sd = read_state_dict(self.checkpoint, "", ("visual_encoder.cls_token",
                             "text_encoder.embeddings.word_embeddings.weight"), "UniIR BLIP-FF")
        self.arch = blip_architecture(sd)
        found = _VISION_VARIANTS.get(self.arch["vision_width"], f"ViT-{self.arch['vision_width']}")
        if variant is not None and variant != found:
            raise ConfigError(f"{self.spec!r} names the {variant} variant but the weights are BLIP {found}")
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
        self.dim = self.arch["text_width"]

    # -- identity ---------------------------------------------------------------------------------
    def identity(self) -> dict[str, Any]:
        base = {k: v for k, v in super().identity().items() if k != "name"}
        return {**base, "backend": "uniir-blip-ff", "variant": self.variant, "text_format": "uniir-format_string",
                "weights": {"uniir": "blip_ff", "weights_sha256": weights_digest(self.checkpoint)[:32]},
                "max_text_length": self.max_text_length, "text_cleaning": None,
                "image_preprocess": self.image_transform.identity()}

    # -- encoding ---------------------------------------------------------------------------------
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
