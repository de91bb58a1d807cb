"""Prompt templates, the three family layouts, and the merged image for single-image models."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from unirag.errors import ConfigError
from unirag.messages import ImagePart, TextPart
from unirag.prompts.caption import build_caption_prompt, caption_template, merge_vertically
from unirag.prompts.templates import TEMPLATES_DIR, load_template
from unirag.retrieval.results import Pair

FIG2 = ("I have provided you an image. Generate the caption for this image based on your understanding of the "
        "image.\nOnly respond with the caption; do not say any other words or explain.")
SYSTEM = "You are an intelligent helpful assistant AI that is an expert in generating captions for provided images."


@pytest.fixture(scope="module")
def coco_images(coco_mini: Path) -> list[Path]:
    rows = [json.loads(x) for x in (coco_mini / "captions.jsonl").read_text().splitlines()[:4]]
    return [coco_mini / r["image"] for r in rows]


def _shots(images: list[Path]) -> list[Pair]:
    return [Pair.of(images[1], "A man rides a skateboard.", "d1"), Pair.of(images[2], "A {tennis} player.", "d2")]


def test_template_sections_and_hash_match_the_file():
    tpl = caption_template("gpt4o")
    raw = (TEMPLATES_DIR / "caption_gpt4o.txt").read_bytes()
    assert tpl.sha256 == hashlib.sha256(raw).hexdigest()
    assert tpl.manifest_entry()["file"] == "caption_gpt4o.txt"
    assert tpl.text("system") == SYSTEM
    assert tpl.text("zero_shot") == FIG2


def test_missing_template_and_bad_sections_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="not found.*available: .*caption_gpt4o"):
        load_template("caption_nope")
    (tmp_path / "caption_x.txt").write_text("### layout\nexamples\nquery_image\n### system\n")
    with pytest.raises(ConfigError, match="missing section"):
        caption_template("x", tmp_path)
    (tmp_path / "t.txt").write_text("just text")
    with pytest.raises(ConfigError, match="no '### section'"):
        load_template("t", tmp_path)
    bad = "### layout\nexamples\nquery_image\nfrobnicate\n### system\n### zero_shot\nz\n### few_shot\n{num}\n" \
          "### example_caption\n{caption}\n"
    (tmp_path / "caption_bad.txt").write_text(bad)
    with pytest.raises(ConfigError, match="unknown layout item.*frobnicate"):
        caption_template("bad", tmp_path)
    unknown = bad.replace("frobnicate\n", "instruction\n").replace("{num}", "{count}")
    (tmp_path / "caption_ph.txt").write_text(unknown)
    tpl = caption_template("ph", tmp_path)
    with pytest.raises(ConfigError, match="unknown placeholder.*count"):
        build_caption_prompt(tpl, Path(__file__), [Pair.of(Path(__file__), "c")])


def test_gpt4o_order_system_examples_query_instruction_last(coco_images):
    """castorini/UniRAG src/unirag/caption_generation_inference.py at commit 294f843a, infer_gpt: a system turn
    with SYSTEM_MESSAGE (:139), then one user turn of image / ``Caption [i]: ...`` pairs (:126-137), the
    query image and the instruction last (:142-149)."""
    p = build_caption_prompt(caption_template("gpt4o"), coco_images[0], _shots(coco_images))
    assert [m.role for m in p.messages] == ["system", "user"]
    assert p.messages[0].text == SYSTEM
    parts = p.messages[1].parts
    kinds = ["img" if isinstance(x, ImagePart) else "txt" for x in parts]
    assert kinds == ["img", "txt", "img", "txt", "img", "txt"]
    assert [parts[i].path for i in (0, 2, 4)] == [coco_images[1], coco_images[2], coco_images[0]]
    assert parts[1].text == "Caption [1]: A man rides a skateboard."
    assert parts[3].text == "Caption [2]: A {tennis} player."  # braces in captions are kept verbatim
    assert parts[5].text.startswith("I have provided you 2 image(s) and their corresponding caption(s)")
    assert p.merged_image is None


def test_gemini_order_instruction_first_no_system_turn(coco_images):
    """castorini/UniRAG src/unirag/caption_generation_inference.py at commit 294f843a, infer_gemini: one content
    list, the instruction first (:61), then each example image and its bare caption (:62-68), the query
    image last (:70). The zero-shot text here is the paper's (with its system sentence: the default
    profile); the official one is pinned in tests/reproduce/test_official_settings.py."""
    p = build_caption_prompt(caption_template("gemini"), coco_images[0], _shots(coco_images))
    assert [m.role for m in p.messages] == ["user"]
    parts = p.messages[0].parts
    assert isinstance(parts[0], TextPart) and parts[0].text.startswith("I have provided you 2 image(s)")
    assert "Only respond with the caption string" in parts[0].text
    assert [type(x).__name__ for x in parts[1:]] == ["ImagePart", "TextPart", "ImagePart", "TextPart", "ImagePart"]
    assert parts[-1].path == coco_images[0]
    zero = build_caption_prompt(caption_template("gemini"), coco_images[0], [])
    assert [type(x).__name__ for x in zero.messages[0].parts] == ["TextPart", "ImagePart"]
    assert zero.messages[0].parts[0].text == SYSTEM + "\n" + FIG2  # Figure 2, generic zero-shot wording


def test_zero_shot_is_figure_2_for_every_family(coco_images):
    for family in ("gpt4o", "llava"):
        p = build_caption_prompt(caption_template(family), coco_images[0], [])
        text = "\n".join(m.text for m in p.messages)
        assert SYSTEM in text and FIG2 in text
        images = [x for m in p.messages for x in m.images]
        assert len(images) == 1 and images[0].path == coco_images[0]  # the query image as is, no merge


def test_llava_names_the_query_image_k_plus_1(coco_images):
    """unirag numbers the query's line ``Caption [k+1]: ...``. castorini/UniRAG ``src/unirag/generator_prompt.py``
    at commit 07190083, ``prepare_llava_message`` (lines 17-33), writes ``Caption [{index+1}]: ...`` after the
    example loop (line 27), where ``index`` is the loop variable: the loop breaks at ``index == num_examples``
    (lines 23-25), so with more retrieved hits than k (UniIR saves 10 or 50) the query's line is
    ``Caption [k+1]``, and only with at most k hits does it repeat the last example's number; the template
    gets ``image_num=num_examples + 1, caption_num=num_examples`` (line 29). The merged image is the
    examples then the query, stacked on black with 5 pixels between them (``merge_images``, lines 51-89)."""
    p = build_caption_prompt(caption_template("llava"), coco_images[0], _shots(coco_images))
    (msg,) = p.messages
    assert isinstance(msg.parts[0], ImagePart) and msg.parts[0].path is None  # one merged image, first
    text = msg.parts[1].text
    assert text.startswith(SYSTEM + "\nI have provided you 3 images. The following 2 captions correspond to the "
                                    "first 2 images.")
    lines = [ln for ln in text.splitlines() if ln.startswith("Caption [")]
    assert lines == ["Caption [1]: A man rides a skateboard.", "Caption [2]: A {tennis} player.", "Caption [3]: ..."]
    sent = Image.open(__import__("io").BytesIO(msg.parts[0].data))
    assert np.array_equal(np.asarray(sent), np.asarray(p.merged_image))  # lossless PNG of the merged image


def test_merged_image_pixel_exact(coco_images):
    """castorini/UniRAG src/unirag/generator_prompt.py at commit 07190083, merge_images (:51-89): width of the
    widest, heights summed plus ``dist_images=5`` between images, black background (:81), each pasted at
    the left edge (:86)."""
    ims = [Image.open(p).convert("RGB") for p in coco_images[:3]]
    ims[1] = ims[1].resize((300, 200))  # a narrower one: right of it must stay background
    merged = merge_vertically(ims, separator=5)
    assert merged.size == (max(i.width for i in ims), sum(i.height for i in ims) + 2 * 5)
    arr = np.asarray(merged)
    y = 0
    for i, im in enumerate(ims):
        a = np.asarray(im)
        assert np.array_equal(arr[y:y + im.height, :im.width], a), f"image {i} not at rows {y}.."
        assert not arr[y:y + im.height, im.width:].any(), "area right of a narrower image must be black"
        y += im.height
        if i < len(ims) - 1:
            assert not arr[y:y + 5].any(), "separator rows must be black"
            y += 5
    assert y == merged.height


def test_merge_rejects_nothing_to_merge():
    with pytest.raises(ValueError):
        merge_vertically([])
