"""Tiny random Hugging Face checkpoints that tests build from a config (no network, no hub).

The checkpoints are written with ``save_pretrained`` and then loaded by the product's own loading code,
so the tests exercise the same path a real hub id or local checkpoint directory takes. Each model is
built once per test process and cached in a temporary directory.
"""

from __future__ import annotations

import atexit
import functools
import inspect
import json
import shutil
import tempfile
from pathlib import Path

_SPECIAL_BOS = "<|startoftext|>"
_SPECIAL_EOS = "<|endoftext|>"


@functools.lru_cache(maxsize=1)
def _tmp_root() -> Path:
    root = Path(tempfile.mkdtemp(prefix="unirag-tiny-models-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root


def _byte_unicode_map() -> dict[int, str]:
    """GPT-2/CLIP byte-level alphabet: every byte mapped to a printable unicode character."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs, strict=True)}


def _byte_unicode_chars() -> list[str]:
    return list(_byte_unicode_map().values())


def tiny_clip_tokenizer():
    """A real ``CLIPTokenizer`` over a byte-level vocabulary (every text tokenises; no download)."""
    from transformers import CLIPTokenizer

    chars = _byte_unicode_chars()
    vocab: dict[str, int] = {}
    for c in chars:
        vocab[c] = len(vocab)
    for c in chars:
        vocab[c + "</w>"] = len(vocab)
    merges = [("t", "h"), ("th", "e</w>"), ("o", "f</w>"), ("a", "n")]
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    vocab[_SPECIAL_BOS] = len(vocab)
    vocab[_SPECIAL_EOS] = len(vocab)
    if "vocab_file" in inspect.signature(CLIPTokenizer.__init__).parameters:
        # transformers 4.x (the oldest supported, 4.56): the tokenizer reads vocab.json and merges.txt
        folder = _tmp_root() / "tiny-clip-tokenizer-files"
        folder.mkdir(exist_ok=True)
        (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
        (folder / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges),
                                           encoding="utf-8")
        return CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"))
    return CLIPTokenizer(vocab=vocab, merges=merges)


def _pil_image_processor(family: str):
    """The PIL-based image processor class: ``<family>ImageProcessorPil`` in transformers 5 (where the plain
    name needs torchvision), the plain ``<family>ImageProcessor`` before (the oldest supported, 4.56)."""
    import transformers

    return getattr(transformers, f"{family}ImageProcessorPil", None) or getattr(transformers, f"{family}ImageProcessor")


def _save(model, processor, out: Path) -> Path:
    """Write a checkpoint as a real one is laid out, into a temp name renamed at the end (so a killed
    test run never leaves a half-written directory that a later run would take as finished)."""
    tmp = out.with_name(out.name + ".partial")
    model.save_pretrained(tmp)
    processor.save_pretrained(tmp)
    tmp.rename(out)
    return out


@functools.lru_cache(maxsize=4)
def tiny_clip_dir(projection_dim: int = 16, image_size: int = 32, seed: int = 0) -> Path:
    """Directory holding a tiny random ``CLIPModel`` + ``CLIPProcessor`` (as ``save_pretrained`` writes them).

    Load it with ``AutoModel.from_pretrained(path)`` / ``AutoProcessor.from_pretrained(path)`` or through
    ``unirag.encoders.registry.load_encoder(str(path))``. Embedding size is ``projection_dim``.
    """
    import torch
    from transformers import CLIPConfig, CLIPModel, CLIPProcessor

    out = _tmp_root() / f"tiny-clip-p{projection_dim}-i{image_size}-s{seed}"
    if (out / "config.json").exists():
        return out
    tok = tiny_clip_tokenizer()
    bos, eos = tok.convert_tokens_to_ids(_SPECIAL_BOS), tok.convert_tokens_to_ids(_SPECIAL_EOS)
    image_processor = _pil_image_processor("CLIP")(
        size={"shortest_edge": image_size}, crop_size={"height": image_size, "width": image_size}
    )
    processor = CLIPProcessor(image_processor=image_processor, tokenizer=tok)
    small = dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4,
                 projection_dim=projection_dim)
    config = CLIPConfig(
        text_config=dict(vocab_size=len(tok), max_position_embeddings=77, bos_token_id=bos, eos_token_id=eos,
                         pad_token_id=eos, **small),
        vision_config=dict(image_size=image_size, patch_size=8, **small),
        projection_dim=projection_dim,
    )
    torch.manual_seed(seed)
    model = CLIPModel(config).eval()
    return _save(model, processor, out)


@functools.lru_cache(maxsize=2)
def tiny_siglip_dir(image_size: int = 32, seed: int = 0) -> Path:
    """Directory holding a tiny random ``SiglipModel`` + ``SiglipProcessor`` (no projection_dim in its config;
    texts padded to a fixed length, as SigLIP expects). Embedding size is 32."""
    import torch
    from transformers import SiglipConfig, SiglipModel, SiglipProcessor

    out = _tmp_root() / f"tiny-siglip-i{image_size}-s{seed}"
    if (out / "config.json").exists():
        return out
    tok = tiny_clip_tokenizer()
    processor = SiglipProcessor(image_processor=_pil_image_processor("Siglip")(size={"height": image_size, "width": image_size}),
                                tokenizer=tok)
    small = dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4)
    config = SiglipConfig(
        text_config=dict(vocab_size=len(tok), max_position_embeddings=16, **small),
        vision_config=dict(image_size=image_size, patch_size=8, **small),
    )
    torch.manual_seed(seed)
    model = SiglipModel(config).eval()
    return _save(model, processor, out)


# A LLaVA-1.5-style chat template (what llava-hf checkpoints ship): images first, then the text.
_LLAVA_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'system' %}{{ message['content'][0]['text'] }}\n"
    "{% else %}{{ message['role'].upper() }}: {% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}<image>\n{% endif %}{% endfor %}"
    "{% for item in message['content'] %}{% if item['type'] == 'text' %}{{ item['text'] }}{% endif %}{% endfor %}"
    "{{ '\\n' }}{% endif %}{% endfor %}{% if add_generation_prompt %}ASSISTANT:{% endif %}"
)


@functools.lru_cache(maxsize=2)
def tiny_llava_dir(image_size: int = 32, seed: int = 0, emits: str = "words") -> Path:
    """Directory holding a tiny random ``LlavaForConditionalGeneration`` + ``LlavaProcessor`` (with a chat
    template), loadable by ``unirag.generators.registry.load_generator(f"hf:{path}")``.

    Random weights alone may answer with special tokens only; the saved ``generation_config.json`` (which
    ``generate`` applies, as it does for a real checkpoint) fixes what the model can say:

    * ``emits="words"``: every token but the lowercase-letter ones is suppressed, so each answer is
      ``max_new_tokens`` letters a-z, one per token (which ones depends on the image and prompt);
    * ``emits="nothing"``: every token but end-of-sequence is suppressed, so each answer is empty;
    * ``emits="reply:<text>"``: a sequence bias makes every answer exactly ``<text>`` then end-of-sequence.
    """
    import hashlib

    import torch
    from transformers import LlavaConfig, LlavaForConditionalGeneration, LlavaProcessor

    if emits not in ("words", "nothing") and not emits.startswith("reply:"):
        raise ValueError(f"emits must be 'words', 'nothing' or 'reply:<text>', not {emits!r}")
    out = _tmp_root() / f"tiny-llava-i{image_size}-s{seed}-{hashlib.sha1(emits.encode()).hexdigest()[:12]}"
    if (out / "config.json").exists():
        return out
    tok = tiny_clip_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": ["<image>"], "pad_token": "<pad>"})
    image_token = tok.convert_tokens_to_ids("<image>")
    eos = tok.convert_tokens_to_ids(_SPECIAL_EOS)
    patch = 8
    image_processor = _pil_image_processor("CLIP")(
        size={"shortest_edge": image_size}, crop_size={"height": image_size, "width": image_size}
    )
    processor = LlavaProcessor(image_processor=image_processor, tokenizer=tok, patch_size=patch,
                               vision_feature_select_strategy="default", chat_template=_LLAVA_CHAT_TEMPLATE,
                               num_additional_image_tokens=1)
    config = LlavaConfig(
        vision_config=dict(model_type="clip_vision_model", hidden_size=32, intermediate_size=37,
                           num_hidden_layers=2, num_attention_heads=4, image_size=image_size, patch_size=patch),
        text_config=dict(model_type="llama", vocab_size=len(tok), hidden_size=32, intermediate_size=37,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, bos_token_id=tok.convert_tokens_to_ids(_SPECIAL_BOS),
                         eos_token_id=eos, pad_token_id=tok.pad_token_id),
        image_token_index=image_token, image_seq_length=(image_size // patch) ** 2,
        vision_feature_select_strategy="default", vision_feature_layer=-2,
    )
    torch.manual_seed(seed)
    model = LlavaForConditionalGeneration(config).eval()
    vocab = tok.get_vocab()
    if emits == "words":
        letters = {i for t, i in vocab.items() if len(t) == 1 and "a" <= t <= "z"}
        model.generation_config.suppress_tokens = sorted(set(range(len(tok))) - letters)
    elif emits == "nothing":
        model.generation_config.suppress_tokens = [i for i in range(len(tok)) if i != eos]
    else:
        # one byte-level character token per byte (no end-of-word marks, so decoding adds no spaces);
        # the bias on each full prefix grows with its length, so the longest match always wins
        chars = _byte_unicode_map()
        ids = [vocab[chars[b]] for b in emits.removeprefix("reply:").encode()] + [eos]
        model.generation_config.sequence_bias = [[ids[: j + 1], 1000.0 * (j + 1)] for j in range(len(ids))]
    return _save(model, processor, out)


def openai_clip_state_dict(width: int = 64, layers: int = 2, patch: int = 8, image_size: int = 32,
                           embed_dim: int = 16, vocab_size: int = 600, context: int = 77, seed: int = 0) -> dict:
    """Random tensors named and shaped as OpenAI CLIP's ``state_dict()`` (what UniIR's ``clip_model`` holds)."""
    import torch

    g = torch.Generator().manual_seed(seed)

    def rnd(*shape, std=0.02):
        return torch.randn(*shape, generator=g) * std

    sd: dict = {}

    def blocks(prefix: str, w: int) -> None:
        for i in range(layers):
            p = f"{prefix}{i}."
            sd[p + "attn.in_proj_weight"], sd[p + "attn.in_proj_bias"] = rnd(3 * w, w, std=w ** -0.5), rnd(3 * w)
            sd[p + "attn.out_proj.weight"], sd[p + "attn.out_proj.bias"] = rnd(w, w, std=w ** -0.5), rnd(w)
            for ln in ("ln_1", "ln_2"):
                sd[p + ln + ".weight"], sd[p + ln + ".bias"] = 1 + rnd(w, std=0.1), rnd(w, std=0.1)
            sd[p + "mlp.c_fc.weight"], sd[p + "mlp.c_fc.bias"] = rnd(4 * w, w, std=w ** -0.5), rnd(4 * w)
            sd[p + "mlp.c_proj.weight"], sd[p + "mlp.c_proj.bias"] = rnd(w, 4 * w, std=(4 * w) ** -0.5), rnd(w)

    grid = image_size // patch
    sd["visual.class_embedding"] = rnd(width, std=width ** -0.5)
    sd["visual.positional_embedding"] = rnd(grid * grid + 1, width, std=width ** -0.5)
    sd["visual.conv1.weight"] = rnd(width, 3, patch, patch, std=0.1)
    for ln in ("ln_pre", "ln_post"):
        sd[f"visual.{ln}.weight"], sd[f"visual.{ln}.bias"] = 1 + rnd(width, std=0.1), rnd(width, std=0.1)
    sd["visual.proj"] = rnd(width, embed_dim, std=width ** -0.5)
    blocks("visual.transformer.resblocks.", width)
    sd["token_embedding.weight"] = rnd(vocab_size, width, std=0.1)
    sd["positional_embedding"] = rnd(context, width, std=0.01)
    sd["ln_final.weight"], sd["ln_final.bias"] = 1 + rnd(width, std=0.1), rnd(width, std=0.1)
    sd["text_projection"] = rnd(width, embed_dim, std=width ** -0.5)
    sd["logit_scale"] = torch.tensor(4.6052)
    blocks("transformer.resblocks.", width)
    return sd


CLIP_BPE_GZ = Path(__file__).resolve().parent / "fixtures" / "clip-bpe" / "bpe_simple_vocab_16e6.txt.gz"


def clip_bpe_merges() -> list[tuple[str, str]]:
    """OpenAI CLIP's 48,894 merges from the committed original file (its first line is a header)."""
    import gzip

    lines = gzip.open(CLIP_BPE_GZ).read().decode("utf-8").split("\n")
    return [tuple(line.split()) for line in lines[1 : 49152 - 256 - 2 + 1]]


def clip_bpe_vocab(merges: list[tuple[str, str]]) -> dict[str, int]:
    """The 49,408-token vocabulary OpenAI builds from the merges: 256 byte symbols, the same with ``</w>``,
    one token per merge, then the start and end tokens."""
    chars = _byte_unicode_chars()
    tokens = chars + [c + "</w>" for c in chars] + ["".join(m) for m in merges] + [_SPECIAL_BOS, _SPECIAL_EOS]
    return {t: i for i, t in enumerate(tokens)}


@functools.lru_cache(maxsize=1)
def clip_bpe_tokenizer_dir() -> Path:
    """A folder with OpenAI CLIP's real tokenizer (``vocab.json``/``merges.txt`` and a ``CLIPTokenizer``'s
    ``save_pretrained`` files), built from the committed BPE file; ``AutoTokenizer`` loads it."""
    from transformers import CLIPTokenizer

    out = _tmp_root() / "clip-bpe-tokenizer"
    if (out / "tokenizer_config.json").exists():
        return out
    tmp = out.with_name(out.name + ".partial")
    tmp.mkdir(parents=True, exist_ok=True)
    merges = clip_bpe_merges()
    vocab = clip_bpe_vocab(merges)
    (tmp / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (tmp / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges), encoding="utf-8")
    if "vocab_file" in inspect.signature(CLIPTokenizer.__init__).parameters:
        tok = CLIPTokenizer(str(tmp / "vocab.json"), str(tmp / "merges.txt"))
    else:
        tok = CLIPTokenizer(vocab=vocab, merges=merges)
    tok.save_pretrained(tmp)
    tmp.rename(out)
    return out


@functools.lru_cache(maxsize=4)
def tiny_uniir_clip_sf(seed: int = 0, image_size: int = 32, patch: int = 8, real_bpe: bool = False) -> Path:
    """A tiny random checkpoint file laid out as UniIR's ``clip_sf_*.pth`` (``{"model": state_dict}`` with the
    OpenAI CLIP under ``clip_model.``), with CLIP tokenizer files beside it. Load it as ``uniir:clip_sf:PATH``.

    ``real_bpe``: OpenAI's real 49,408-token tokenizer (:func:`clip_bpe_tokenizer_dir`) instead of the tiny
    byte-level one; ``image_size``/``patch``: the vision tower's input resolution and patch size."""
    import torch
    from transformers import AutoTokenizer

    folder = _tmp_root() / f"tiny-uniir-clip-sf-s{seed}-i{image_size}-p{patch}{'-bpe' if real_bpe else ''}"
    ckpt = folder / "clip_sf_tiny.pth"
    if ckpt.exists():
        return ckpt
    tmp = folder.with_name(folder.name + ".partial")
    tmp.mkdir(parents=True, exist_ok=True)
    if real_bpe:
        for f in clip_bpe_tokenizer_dir().iterdir():
            shutil.copy(f, tmp / f.name)
        tok = AutoTokenizer.from_pretrained(tmp)
    else:
        tok = tiny_clip_tokenizer()
        tok.save_pretrained(tmp)
    sd = openai_clip_state_dict(vocab_size=len(tok), seed=seed, image_size=image_size, patch=patch)
    torch.save({"model": {f"clip_model.{k}": v for k, v in sd.items()}}, tmp / ckpt.name)
    tmp.rename(folder)
    return ckpt


@functools.lru_cache(maxsize=1)
def tiny_sd_dir() -> Path:
    """A tiny random ``StableDiffusionPipeline`` saved with ``save_pretrained`` (about 350 kB; 2 steps at
    32x32 take ~0.1 s on CPU), loadable as ``diffusers:<dir>``."""
    import torch
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    out = _tmp_root() / "tiny-sd"
    if (out / "model_index.json").exists():
        return out
    torch.manual_seed(0)
    tok = tiny_clip_tokenizer()
    tok.model_max_length = 77
    unet = UNet2DConditionModel(
        block_out_channels=(4, 8), layers_per_block=1, sample_size=32, in_channels=4, out_channels=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"), up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        cross_attention_dim=32, norm_num_groups=2)
    vae = AutoencoderKL(block_out_channels=[4, 8], in_channels=3, out_channels=3,
                        down_block_types=["DownEncoderBlock2D"] * 2, up_block_types=["UpDecoderBlock2D"] * 2,
                        latent_channels=4, norm_num_groups=2)
    text_encoder = CLIPTextModel(CLIPTextConfig(
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id or 0,
        hidden_size=32, intermediate_size=37, num_attention_heads=4, num_hidden_layers=2, vocab_size=len(tok),
        max_position_embeddings=77))
    scheduler = DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", clip_sample=False,
                              steps_offset=1, set_alpha_to_one=False)
    pipe = StableDiffusionPipeline(unet=unet, vae=vae, text_encoder=text_encoder, tokenizer=tok, scheduler=scheduler,
                                   safety_checker=None, feature_extractor=None, requires_safety_checker=False)
    tmp = out.with_name(out.name + ".partial")
    pipe.save_pretrained(tmp)
    tmp.rename(out)
    return out


def tiny_bert_tokenizer(folder: Path):
    """A real ``BertTokenizer`` (lower-casing WordPiece) over letters and a few words, saved in ``folder``, with
    BLIP's added ``[DEC]``/``[ENC]`` tokens (as UniIR's ``init_tokenizer``)."""
    from transformers import BertTokenizer

    words = ["a", "the", "of", "on", "in", "with", "and", "man", "dog", "dogs", "two", "red", "bus", "street",
             "kitchen", "find", "image", "caption", "retrieve", "everyday", "describing", "this", "photo"]
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "!", "?", "'", *letters,
             *[f"##{c}" for c in letters], *[w for w in words if w not in letters]]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    if "vocab_file" in inspect.signature(BertTokenizer.__init__).parameters:  # transformers 4.x
        tok = BertTokenizer(vocab_file=str(folder / "vocab.txt"), do_lower_case=True)
    else:  # transformers 5 takes the vocabulary itself (a vocab_file keyword would be ignored: 5 tokens)
        tok = BertTokenizer(vocab={w: i for i, w in enumerate(vocab)}, do_lower_case=True)
    tok.save_pretrained(folder)
    tok.add_special_tokens({"bos_token": "[DEC]"})
    tok.add_special_tokens({"additional_special_tokens": ["[ENC]"]})
    return tok


def uniir_blip_ff_state_dict(vocab_size: int, width: int = 64, layers: int = 2, patch: int = 8, image_size: int = 32,
                             positions: int = 160, seed: int = 0) -> dict:
    """Random tensors named and shaped as UniIR's ``BLIPFeatureFusion.state_dict()`` (timm ViT under
    ``visual_encoder.``, BLIP ``med.py`` BertModel under ``text_encoder.``, momentum copies and queues)."""
    import torch

    g = torch.Generator().manual_seed(seed)

    def rnd(*shape, std=0.02):
        return torch.randn(*shape, generator=g) * std

    def ln(prefix, w):
        return {prefix + ".weight": 1 + rnd(w, std=0.1), prefix + ".bias": rnd(w, std=0.1)}

    def lin(prefix, out_f, in_f):
        return {prefix + ".weight": rnd(out_f, in_f, std=in_f ** -0.5), prefix + ".bias": rnd(out_f, std=0.02)}

    v: dict = {"cls_token": rnd(1, 1, width, std=0.5), "pos_embed": rnd(1, (image_size // patch) ** 2 + 1, width, std=0.5),
               "patch_embed.proj.weight": rnd(width, 3, patch, patch, std=0.1), "patch_embed.proj.bias": rnd(width),
               **ln("norm", width)}
    for i in range(layers):
        b = f"blocks.{i}."
        v |= {**ln(b + "norm1", width), **lin(b + "attn.qkv", 3 * width, width), **lin(b + "attn.proj", width, width),
              **ln(b + "norm2", width), **lin(b + "mlp.fc1", 4 * width, width), **lin(b + "mlp.fc2", width, 4 * width)}
    t: dict = {"embeddings.word_embeddings.weight": rnd(vocab_size, width, std=0.5),
               "embeddings.position_embeddings.weight": rnd(positions, width, std=0.1),
               "embeddings.position_ids": torch.arange(positions).unsqueeze(0), **ln("embeddings.LayerNorm", width),
               **lin("pooler.dense", width, width)}
    for i in range(layers):
        b = f"encoder.layer.{i}."
        for att, kv_in in (("attention", width), ("crossattention", width)):
            t |= {**lin(b + att + ".self.query", width, width), **lin(b + att + ".self.key", width, kv_in),
                  **lin(b + att + ".self.value", width, kv_in), **lin(b + att + ".output.dense", width, width),
                  **ln(b + att + ".output.LayerNorm", width)}
        t |= {**lin(b + "intermediate.dense", 4 * width, width), **lin(b + "output.dense", width, 4 * width),
              **ln(b + "output.LayerNorm", width)}
    sd = {f"visual_encoder.{k}": x for k, x in v.items()} | {f"text_encoder.{k}": x for k, x in t.items()}
    # what the real checkpoint also holds and a loader must ignore
    sd |= {f"visual_encoder_m.{k}": x.clone() for k, x in v.items()} | {f"text_encoder_m.{k}": x.clone() for k, x in t.items()}
    sd |= {"query_queue": rnd(width, 8), "cand_queue": rnd(width, 8), "temp": torch.tensor(0.07)}
    return sd


@functools.lru_cache(maxsize=2)
def tiny_uniir_blip_ff(seed: int = 0) -> Path:
    """A tiny random checkpoint laid out as UniIR's ``blip_ff_*.pth`` (``{"model": state_dict}``) with a BERT
    tokenizer beside it. Load it as ``uniir:blip_ff:PATH``."""
    import torch

    folder = _tmp_root() / f"tiny-uniir-blip-ff-s{seed}"
    ckpt = folder / "blip_ff_tiny.pth"
    if ckpt.exists():
        return ckpt
    tmp = folder.with_name(folder.name + ".partial")
    tok = tiny_bert_tokenizer(tmp)
    torch.save({"model": uniir_blip_ff_state_dict(len(tok), seed=seed)}, tmp / ckpt.name)
    tmp.rename(folder)
    return ckpt
