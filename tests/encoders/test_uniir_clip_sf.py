"""UniIR CLIP-SF: a tiny checkpoint in UniIR's key layout, loaded through ``uniir:``, must give the embeddings
of a reference forward pass written here from the OpenAI CLIP architecture (the code UniIR runs)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from openai_clip_reference import normalise as _normalise
from openai_clip_reference import openai_pixels, ref_encode_image, ref_encode_text
from tiny_models import tiny_clip_tokenizer, tiny_uniir_clip_sf
from unirag.data.records import Modality, Query
from unirag.encoders.instructions import QueryInstructions, format_string
from unirag.encoders.registry import load_encoder
from unirag.errors import ConfigError

FIXTURE_TSV = Path(__file__).resolve().parents[1] / "fixtures" / "mbeir" / "query_instructions.tsv"


def openai_tokens(texts, context=77):
    """clip.tokenize's layout (SOT, BPE, EOT, zeros) with the tiny checkpoint's vocabulary."""
    tok = tiny_clip_tokenizer()
    out = torch.zeros(len(texts), context, dtype=torch.long)
    for i, t in enumerate(texts):
        ids = tok(t, truncation=True, max_length=context)["input_ids"]
        out[i, : len(ids)] = torch.tensor(ids)
    return out


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
    pixels = torch.from_numpy(np.stack([openai_pixels(im, 32) for im in pils])).double()
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
    """TIGER-AI-Lab/UniIR ``src/data/mbeir_dataset.py`` at commit 1017242a, ``_load_query_instructions``
    (lines 82-101): the header is skipped, each row keyed by ``f"{dataset_id}, {query_modality},
    {cand_modality}"`` (line 98), its non-empty prompt cells ``parts[4:]`` kept (line 99); dataset ids
    from ``src/data/preprocessing/utils.py`` at commit 669475c4, ``DATASET_IDS`` lines 8-19 (MSCOCO 9)."""
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
    """TIGER-AI-Lab/UniIR ``src/data/mbeir_dataset.py`` at commit 1017242a: the prompt is
    ``format_string(random.choice(prompts))`` of the query's row (``_get_random_query_prompt``, lines
    115-121) and the query text ``format_string(f"{query_prompt} {query_txt}")`` (line 245); an image
    query's text is ``""`` (line 207), so its text is the prompt alone. ``format_string``:
    ``src/data/preprocessing/utils.py`` at commit 669475c4, lines 110-116. unirag's own choice: the prompt
    is drawn from the qid (the same query always gets the same prompt), where UniIR draws from ``random``
    seeded once per run."""
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


# -- OpenAI's image transform, on real photos of every aspect ratio ---------------------------------------------
def _floor_differs(image, n_px: int) -> bool:
    """Whether Hugging Face's floored offset ((size - n_px) // 2) would cut elsewhere than OpenAI's."""
    w, h = image.size
    long_side = int(n_px * max(w, h) / min(w, h))
    return round((long_side - n_px) / 2.0) != (long_side - n_px) // 2


@pytest.fixture(scope="module")
def clip224():
    """A tiny checkpoint at CLIP's real input size (224, 32-pixel patches: ViT-B/32's geometry)."""
    ckpt = tiny_uniir_clip_sf(image_size=224, patch=32)
    sd = torch.load(ckpt, map_location="cpu", weights_only=True)["model"]
    raw = {k.removeprefix("clip_model."): v.double() for k, v in sd.items()}
    return load_encoder(f"uniir:clip_sf:{ckpt}", device="cpu", dtype="float32", use_instructions=False), raw


@pytest.fixture(scope="module")
def every_aspect(coco_mini):
    """Real COCO photos as they come (landscape, 640 wide) and cut/turned/scaled into every shape: portrait,
    square, odd sizes, a panorama, tiny, exactly the input size, grey-scale."""
    from PIL import Image

    rows = [json.loads(line) for line in (coco_mini / "captions.jsonl").read_text().splitlines()]
    photos = [Image.open(coco_mini / r["image"]).convert("RGB") for r in rows[:8]]
    a, b = photos[0], photos[1]
    made = [
        a.rotate(90, expand=True),                      # portrait
        b.transpose(Image.Transpose.ROTATE_270),        # portrait
        a.crop((0, 0, min(a.size), min(a.size))),       # square
        b.resize((641, 479), Image.BICUBIC),            # odd landscape
        b.resize((479, 641), Image.BICUBIC),            # odd portrait
        a.crop((0, 100, 640, 227)),                     # panorama 640x127
        a.resize((7, 5), Image.BICUBIC),                # tiny
        a.resize((3, 40), Image.BICUBIC),               # tiny and tall
        a.resize((224, 224), Image.BICUBIC),            # already the input size
        a.resize((224, 301), Image.BICUBIC),            # short side already 224
        photos[2].convert("L").convert("RGB"),          # grey-scale photo
    ]
    return photos + made


def test_image_embeddings_match_openai_transform_on_every_aspect_ratio(clip224, every_aspect):
    """unirag's CLIP-SF image vectors equal OpenAI's transform + the OpenAI CLIP forward on the same random
    checkpoint to 1e-5, for real photos of every shape (UniIR CLIP-SF preprocesses with ``clip.load``'s
    transform: TIGER-AI-Lab/UniIR ``src/models/uniir_clip/clip_scorefusion/clip_sf.py`` at commit 669475c4,
    line 18; the images are opened with ``Image.open(...).convert("RGB")`` first, ``src/data/mbeir_dataset.py``
    at commit 1017242a line 111; OpenAI's ``_transform`` is ``clip/clip.py`` lines 58-65 at commit 0848ed71)."""
    encoder, raw = clip224
    shapes = {im.size for im in every_aspect}
    assert len(shapes) >= 12
    # The set includes photos where the floored (Hugging Face) crop is a pixel off: the test can tell them apart.
    off = [im for im in every_aspect if _floor_differs(im, 224)]
    assert len(off) >= 3, [im.size for im in every_aspect]
    pixels = torch.from_numpy(np.stack([openai_pixels(im, 224) for im in every_aspect])).double()
    expected = _normalise(ref_encode_image(raw, pixels).numpy())
    got = encoder.encode_images(every_aspect)
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)
    # What the old floored crop gives is measurably different on those photos.
    floored = []
    for im in off:
        w, h = im.size
        new = (224, int(224 * h / w)) if w <= h else (int(224 * w / h), 224)
        r = im.resize(new, 3)
        left, top = (new[0] - 224) // 2, (new[1] - 224) // 2
        floored.append(encoder.encode_images([r.crop((left, top, left + 224, top + 224))])[0])
    rows = [i for i, im in enumerate(every_aspect) if _floor_differs(im, 224)]
    assert np.abs(np.stack(floored) - expected[rows]).max() > 1e-4


def test_image_paths_and_pil_images_give_the_same_vectors(clip224, coco_mini):
    encoder, _ = clip224
    from PIL import Image

    rows = [json.loads(line) for line in (coco_mini / "captions.jsonl").read_text().splitlines()[:2]]
    paths = [coco_mini / r["image"] for r in rows]
    np.testing.assert_allclose(encoder.encode_images(paths), encoder.encode_images([Image.open(p) for p in paths]),
                               atol=1e-6)


def test_preprocessing_choices_are_in_the_fingerprint(ckpt):
    """An index built with other preprocessing (the floored crop, no text clean-up, another text length) is
    recognised as built by another encoder configuration."""
    from unirag.encoders.preprocess import OpenAIClipTransform

    enc = load_encoder(f"uniir:clip_sf:{ckpt}", device="cpu", use_instructions=False)
    ident = enc.identity()
    assert ident["image_preprocess"] == {"kind": "openai-clip", "size": 32, "resize": "pil-bicubic-shorter-side",
                                         "crop_offset": "round", "mean": [0.48145466, 0.4578275, 0.40821073],
                                         "std": [0.26862954, 0.26130258, 0.27577711]}
    assert ident["text_cleaning"].startswith("openai-clip") and ident["max_text_length"] == 77
    base = enc.fingerprint()
    enc.image_transform = OpenAIClipTransform(32, crop_rounding="floor")
    assert enc.fingerprint() != base
    enc.image_transform = OpenAIClipTransform(32)
    assert enc.fingerprint() == base
    enc.text_cleaning = None
    assert enc.fingerprint() != base
    enc.text_cleaning = ident["text_cleaning"]
    enc.max_text_length = 64
    assert enc.fingerprint() != base


def test_official_uniir_precision_is_float32_weights_under_float16_autocast(ckpt, photos, monkeypatch):
    """UniIR embeds with ``use_fp16: true`` (TIGER-AI-Lab/UniIR src/models/uniir_clip/clip_scorefusion/
    configs_scripts/large/eval/unirag/embed.yaml@98dc570:77), i.e. ``with autocast(enabled=use_fp16)`` around
    float32 weights (src/common/mbeir_embedder.py@98dc570:52-53, :138-139); unirag's ``auto`` loads bfloat16
    weights on a GPU. An explicit --dtype wins; other encoders are untouched."""
    import contextlib

    from unirag.encoders.registry import precision_options

    spec = f"uniir:clip_sf:{ckpt}"
    assert precision_options(spec, "auto", "official") == {"dtype": "float32", "autocast": "float16"}
    assert precision_options(spec, "auto", "default") == {"dtype": "auto"}
    assert precision_options(spec, "bfloat16", "official") == {"dtype": "bfloat16"}
    assert precision_options("openai/clip-vit-base-patch32", "auto", "official") == {"dtype": "auto"}
    enc = load_encoder(spec, device="cpu", use_instructions=False, **precision_options(spec, "auto", "official"))
    assert enc.torch_dtype == torch.float32 and enc.config()["autocast"] == "float16"
    assert isinstance(enc._autocast(), contextlib.nullcontext)  # on a CPU: float32, as UniIR's CUDA-only autocast
    seen = []
    monkeypatch.setattr(torch, "autocast", lambda device_type, dtype: seen.append((device_type, dtype))
                        or contextlib.nullcontext())
    enc.device = "cuda:0"  # what the forward passes would enter on a GPU
    enc._autocast()
    assert seen == [("cuda", torch.float16)]
    enc.device = "cpu"
    entered = []  # the text and the image forward passes both run inside it (mbeir_embedder.py :138-139)
    monkeypatch.setattr(enc, "_autocast", lambda: entered.append(1) or contextlib.nullcontext())
    enc.encode_texts(["a dog on a sofa"])
    enc.encode_images(photos[:1])
    assert len(entered) == 2
