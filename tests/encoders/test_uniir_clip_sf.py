"""UniIR CLIP-SF: a tiny checkpoint in UniIR's key layout, loaded through ``uniir:``, must give the embeddings
of a reference forward pass written here from the OpenAI CLIP architecture (the code UniIR runs)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tiny_models import tiny_clip_tokenizer, tiny_uniir_clip_sf
from unirag.data.records import Modality, Query
from unirag.encoders.instructions import QueryInstructions, format_string
from unirag.encoders.registry import load_encoder
from unirag.errors import ConfigError

FIXTURE_TSV = Path(__file__).resolve().parents[1] / "fixtures" / "mbeir" / "query_instructions.tsv"


# -- reference: OpenAI CLIP (clip/model.py) forward on the raw state dict -------------------------------------
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


def openai_tokens(texts, context=77):
    """clip.tokenize's layout (SOT, BPE, EOT, zeros) with the tiny checkpoint's vocabulary."""
    tok = tiny_clip_tokenizer()
    out = torch.zeros(len(texts), context, dtype=torch.long)
    for i, t in enumerate(texts):
        ids = tok(t, truncation=True, max_length=context)["input_ids"]
        out[i, : len(ids)] = torch.tensor(ids)
    return out


def _normalise(x):
    x = np.asarray(x, np.float64)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


@pytest.fixture(scope="module")
def ckpt() -> Path:
    return tiny_uniir_clip_sf()


@pytest.fixture(scope="module")
def raw_sd(ckpt):
    sd = torch.load(ckpt, map_location="cpu", weights_only=True)["model"]
    return {k.removeprefix("clip_model."): v.double() for k, v in sd.items()}


@pytest.fixture(scope="module")
def encoder(ckpt):
    return load_encoder(f"uniir:clip_sf:{ckpt}", device="cpu", dtype="float32", use_instructions=False)


@pytest.fixture(scope="module")
def photos(coco_mini: Path) -> list[Path]:
    rows = [json.loads(line) for line in (coco_mini / "captions.jsonl").read_text().splitlines()[:3]]
    return [coco_mini / r["image"] for r in rows]


def test_converted_checkpoint_reproduces_openai_clip_forward(encoder, raw_sd, photos):
    texts = ["A man riding a motorcycle down a dirt road.", "Two dogs.", "A kitchen with a stove and a red kettle."]
    # UniIR formats every text with format_string before tokenising; the reference gets the same strings.
    ref_t = ref_encode_text(raw_sd, openai_tokens([format_string(t) for t in texts])).numpy()
    from PIL import Image

    pils = [Image.open(p).convert("RGB") for p in photos]
    pixels = encoder.processor.image_processor(images=pils, return_tensors="pt")["pixel_values"].double()
    ref_i = ref_encode_image(raw_sd, pixels).numpy()
    np.testing.assert_allclose(encoder.encode_texts(texts), _normalise(ref_t), atol=1e-4)
    np.testing.assert_allclose(encoder.encode_images(photos), _normalise(ref_i), atol=1e-4)
    # CLIP-SF fusion: the raw embeddings are summed, then normalised (not the sum of unit vectors).
    np.testing.assert_allclose(encoder.encode_fused(photos, texts), _normalise(ref_i + ref_t), atol=1e-4)
    assert not np.allclose(_normalise(ref_i + ref_t), _normalise(_normalise(ref_i) + _normalise(ref_t)), atol=1e-3)


def test_architecture_is_read_from_the_weights(encoder):
    assert encoder.arch["vision_width"] == 64 and encoder.arch["patch_size"] == 8 and encoder.arch["image_size"] == 32
    assert encoder.dim == 16 and encoder.config()["backend"] == "uniir-clip-sf"
    assert encoder.config()["dtype"] == "float32" and encoder.config()["device"] == "cpu"


def test_same_weights_elsewhere_same_fingerprint_and_dtype_does_not_change_it(ckpt, encoder, tmp_path):
    copy = tmp_path / "elsewhere"
    shutil.copytree(ckpt.parent, copy)
    moved = load_encoder(f"uniir:clip_sf:{copy / ckpt.name}", device="cpu", dtype="bfloat16", use_instructions=False)
    assert moved.fingerprint() == encoder.fingerprint()
    other = tiny_uniir_clip_sf(seed=1)
    assert load_encoder(f"uniir:clip_sf:{other}", device="cpu").fingerprint() != encoder.fingerprint()


def test_bad_uniir_specs_are_config_errors(ckpt, tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_encoder(f"uniir:clip_sf:{tmp_path / 'missing.pth'}")
    with pytest.raises(ConfigError, match="large variant"):
        load_encoder(f"uniir:clip_sf:large:{ckpt}")
    with pytest.raises(ConfigError, match="BLIP"):
        load_encoder(f"uniir:blip_ff:{ckpt}")
    not_clip = tmp_path / "other.pth"
    torch.save({"model": {"foo.weight": torch.zeros(2)}}, not_clip)
    with pytest.raises(ConfigError, match="not a UniIR CLIP-SF checkpoint"):
        load_encoder(f"uniir:clip_sf:{not_clip}")


# -- M-BEIR query instructions ----------------------------------------------------------------------------------
def test_fixture_tsv_parses_in_mbeir_layout():
    inst = QueryInstructions.read(FIXTURE_TSV)
    q = Query(qid="9:6", modality=Modality.IMAGE, img_path="x.jpg", task_id=3)
    prompts = inst.candidates_for(q)
    assert prompts and len(prompts) == 4
    # A query of the same task from another dataset gets that dataset's row, not MSCOCO's.
    f200k = inst.candidates_for(Query(qid="1:6", modality=Modality.IMAGE, img_path="x.jpg", task_id=3))
    assert f200k and set(f200k).isdisjoint(prompts)
    # unirag's COCO importer names queries coco:...; they map to M-BEIR's MSCOCO (dataset id 9).
    assert inst.candidates_for(Query(qid="coco:q3:139", modality=Modality.IMAGE, task_id=3)) == prompts


def test_instructions_are_prepended_as_mbeir_does(ckpt):
    inst = QueryInstructions.read(FIXTURE_TSV)
    enc = load_encoder(f"uniir:clip_sf:{ckpt}", device="cpu", instructions=str(FIXTURE_TSV))
    text_q = Query(qid="9:1", modality=Modality.TEXT, txt="a man with a red helmet on a small moped on a dirt road",
                   task_id=0)
    got = enc.instruct(text_q)
    prompt = inst.instruction_for(text_q)
    # one of the four prompts of the fixture's text->image MSCOCO row, read straight from the file
    row = next(r.split("\t") for r in FIXTURE_TSV.read_text().splitlines() if r.startswith("text\timage\tMSCOCO\t"))
    assert prompt in row[4:8]
    # format_string(f"{prompt} {query_txt}"): one space, only the first character capitalised, final period added.
    assert got.txt == f"{prompt} a man with a red helmet on a small moped on a dirt road."
    assert got.modality is Modality.TEXT
    # An image query becomes image+text with the instruction as its text; it is then encoded as a fused query.
    img_q = Query(qid="9:6", modality=Modality.IMAGE, img_path="x.jpg", task_id=3)
    got_img = enc.instruct(img_q)
    assert got_img.modality is Modality.IMAGE_TEXT and got_img.txt == inst.instruction_for(img_q)
    assert got_img.img_path == "x.jpg"
    # The same qid always draws the same prompt; the draw covers more than one prompt across queries.
    assert enc.instruct(text_q).txt == got.txt
    drawn = {inst.instruction_for(Query(qid=f"9:{i}", modality=Modality.TEXT, txt="x", task_id=0)) for i in range(40)}
    assert len(drawn) > 1


def test_instructed_query_vector_is_the_fused_instruction_vector(ckpt, photos, coco_mini):
    enc = load_encoder(f"uniir:clip_sf:{ckpt}", device="cpu", instructions=str(FIXTURE_TSV))
    rel = str(photos[0].relative_to(coco_mini))
    q = Query(qid="9:6", modality=Modality.IMAGE, img_path=rel, task_id=3)
    vec = enc.encode_records([q], coco_mini)[0]
    prompt = QueryInstructions.read(FIXTURE_TSV).instruction_for(q)
    np.testing.assert_allclose(vec, enc.encode_fused([photos[0]], [prompt])[0], atol=1e-5)
    off = load_encoder(f"uniir:clip_sf:{ckpt}", device="cpu", use_instructions=False)
    np.testing.assert_allclose(off.encode_records([q], coco_mini)[0], off.encode_images([photos[0]])[0], atol=1e-5)


def test_missing_instructions_file_is_a_clear_error(ckpt, tmp_path):
    enc = load_encoder(f"uniir:clip_sf:{ckpt}", device="cpu")
    with pytest.raises(ConfigError, match="--no-instructions"):
        enc.instruct(Query(qid="9:1", modality=Modality.TEXT, txt="x", task_id=0))
    bad = tmp_path / "query_instructions.tsv"
    bad.write_text("query_modality\tcand_modality\tdataset_name\tdataset_id\tprompt_1\ntext\timage\tMSCOCO\n")
    from unirag.errors import InputError

    with pytest.raises(InputError, match="query_instructions.tsv:2"):
        QueryInstructions.read(bad)
