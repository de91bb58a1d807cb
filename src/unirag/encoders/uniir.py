"""UniIR's CLIP-SF retriever (one of the paper's retrievers) from its released checkpoint file, without UniIR's code.

``uniir:clip_sf[:large|:base]:PATH`` loads the ``CLIPScoreFusion`` state dict UniIR saves (OpenAI CLIP
under ``clip_model.``), converts it to a Hugging Face ``CLIPModel`` and runs it through the CLIP-family
backend. The architecture is read from the tensor shapes as OpenAI's ``clip.model.build_model`` does, so
the variant in the spec is only checked. No ``clip``/``open_clip`` package, no torchvision.

As UniIR does: image+text inputs are the sum of the *raw* embeddings, texts go through ``format_string``,
and queries get M-BEIR's query instructions (:mod:`unirag.encoders.instructions`) unless switched off.
Preprocessing and the official lines it follows: docs/encoders-parity.md. BLIP-FF
(:mod:`unirag.encoders.uniir_blip`) shares :class:`UniIRCheckpoint` and the weight loading.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from unirag.data.records import Candidate, Query
from unirag.encoders.hf_clip import HFClipEncoder
from unirag.encoders.instructions import QueryInstructions, format_string
from unirag.encoders.preprocess import OpenAIClipTransform
from unirag.errors import ConfigError
from unirag.runtime import check_model_spec, hf_from_pretrained, weights_digest

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
    out = {}
    for k, v in sd.items():
        k = k.removeprefix("module.")
        if k.startswith(prefix):
            out[k.removeprefix(prefix)] = v
    if any(r not in out for r in required):
        raise ConfigError(f"{path} is not a {what} checkpoint: no {', '.join(required)} under {prefix!r} "
                          f"(first keys: {list(sd)[:3]})")
    return out


def count_blocks(sd: dict[str, Any], pattern: str) -> int:
    """How many numbered blocks the keys matching ``pattern`` (one ``(\\d+)`` group) name."""
    pat = re.compile(pattern)
    return len({m.group(1) for k in sd if (m := pat.match(k))})


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

    def _open(self, spec: str, device: str | None, dtype: str | None,
              instructions: str | Path | QueryInstructions | None, use_instructions: bool | None,
              **state_dict: Any) -> tuple[str | None, dict[str, Any]]:
        """Set the spec (``uniir:clip_sf[:variant]:PATH``), checkpoint, device, precision and instructions; returns
        the variant the spec names (or None) and the checkpoint's tensors (see :func:`read_state_dict`)."""
        m = re.fullmatch(r"uniir:([a-z_]+):(?:(base|large):)?(.+)", spec.strip(), flags=re.IGNORECASE)
        if not m:
            raise ConfigError(f"UniIR encoder spec {spec!r} should read uniir:MODEL:PATH or uniir:MODEL:large:PATH "
                              f"(MODEL: {', '.join(MODELS)})")
        model, variant, path = m.group(1).lower(), m.group(2), Path(m.group(3)).expanduser()
        if model not in MODELS:
            raise ConfigError(f"{spec!r}: unknown UniIR model {model!r}; supported: {', '.join(MODELS)}")
        if not path.is_file():
            raise ConfigError(f"UniIR checkpoint {str(path)!r} does not exist (spec {spec!r})")
        self.spec, self.checkpoint, variant = spec, path.resolve(), variant.lower() if variant else None
        self._place(device, dtype)
        self.use_instructions = use_instructions is not False
        self._instructions_source = instructions
        self._instructions: QueryInstructions | None = (instructions if isinstance(instructions, QueryInstructions)
                                                         else None)
        self._warned = False
        return variant, read_state_dict(self.checkpoint, **state_dict)

    def weights_sha256(self) -> str:
        return weights_digest(self.checkpoint)[:32]

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
        if instructed is None:
            if not self._warned:
                warnings.warn(f"no M-BEIR instruction for query {query.qid!r} (its dataset and task_id name no row of "
                              f"{self.instructions().source}); such queries are encoded without one", stacklevel=2)
                self._warned = True
            return query
        return instructed

    def encode_records(self, records: Sequence[Candidate | Query], images_root, progress: bool = False) -> np.ndarray:
        records = [self.instruct(r) if isinstance(r, Query) else r for r in records]
        return super().encode_records(records, images_root, progress)


class UniIRClipSFEncoder(UniIRCheckpoint, HFClipEncoder):
    """UniIR CLIP-SF: raw-sum fusion, UniIR text formatting, M-BEIR query instructions."""

    def __init__(self, spec: str, *, device: str | None = "auto", dtype: str | None = "auto",
                 batch_size: int | None = None, tokenizer: str | None = None,
                 instructions: str | Path | QueryInstructions | None = None, use_instructions: bool | None = None) -> None:
        variant, sd = self._open(spec, device, dtype, instructions, use_instructions)
        self.arch = architecture(sd)
        self.arch_name = _ARCH_NAMES.get((self.arch["vision_width"], self.arch["patch_size"]),
                                         f"ViT-{self.arch['vision_width']}/{self.arch['patch_size']}")
        if variant is not None and VARIANTS[variant][0] != self.arch_name:
            raise ConfigError(f"{spec!r} names the {variant} variant ({VARIANTS[variant][0]}) but the weights are "
                              f"{self.arch_name}")
        default = VARIANTS[variant or ("base" if self.arch_name == "ViT-B/32" else "large")][1]
        tok = load_tokenizer(tokenizer, self.checkpoint, _TOKENIZER_FILES, default, "CLIP tokenizer")
        model = build_clip_model(sd, self.arch, tok, self.torch_dtype)
        del sd
        self._setup(model, tok, self.arch["context_length"], batch_size,
                    image_transform=OpenAIClipTransform(self.arch["image_size"]))

    # -- identity ---------------------------------------------------------------------------------
    def weights(self) -> dict[str, Any]:
        return {"uniir": "clip_sf", "arch": self.arch_name, "weights_sha256": self.weights_sha256()}

    def identity(self) -> dict[str, Any]:
        return {**super().identity(), "backend": "uniir-clip-sf", "text_format": "uniir-format_string"}

    # -- encoding ---------------------------------------------------------------------------------
    def _embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        return super()._embed_texts([format_string(t) for t in texts])
