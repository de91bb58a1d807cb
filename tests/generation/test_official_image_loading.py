"""``image_loading = plain``: the official code's ``Image.open(path).convert("RGB")``, no EXIF rotation."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from unirag.data.images import load_rgb


@pytest.fixture
def rotated_and_transparent(tmp_path):
    """A JPEG stored 40x20 with EXIF orientation 6 (shown rotated, 20x40) and a half-transparent PNG whose
    transparent pixels hold red."""
    jpeg = tmp_path / "rotated.jpg"
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.new("RGB", (40, 20), (10, 200, 30)).save(jpeg, exif=exif.tobytes())
    png = tmp_path / "clear.png"
    pixels = np.zeros((8, 8, 4), dtype=np.uint8)
    pixels[..., 0] = 255  # red, fully transparent
    Image.fromarray(pixels, "RGBA").save(png)
    return jpeg, png


def test_plain_loading_is_pils_convert_rgb(rotated_and_transparent):
    """castorini/UniRAG src/unirag/generator_prompt.py@07190083:50-88 (merge_images: ``Image.open`` and
    ``paste`` onto an RGB canvas) and caption_generation_inference.py@e9a4e00:66-74 open the files as stored:
    no EXIF rotation; a transparent pixel keeps its stored colour (PIL's convert drops the alpha)."""
    jpeg, png = rotated_and_transparent
    plain_jpeg, plain_png = load_rgb(jpeg, loading="plain"), load_rgb(png, loading="plain")
    assert plain_jpeg.size == (40, 20)
    assert np.array_equal(np.asarray(plain_png), np.asarray(Image.open(png).convert("RGB")))
    assert plain_png.getpixel((0, 0)) == (255, 0, 0)
    assert load_rgb(jpeg).size == (20, 40)  # unirag: upright
    assert load_rgb(png).getpixel((0, 0)) == (255, 255, 255)  # unirag: composited on white


def test_official_captioner_builds_its_merged_image_from_plain_loads(rotated_and_transparent, monkeypatch):
    """A Captioner under ``official`` renders its prompt images plainly: the merged single image of the
    LLaVA family keeps the stored (unrotated) example."""
    from unirag.pipelines.captioner import Captioner

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    jpeg, png = rotated_and_transparent
    for profile, width in (("official", 40), ("default", 20)):
        captioner = Captioner("openai:gpt-4o", profile=profile, family="llava", base_url="http://127.0.0.1:9/v1")
        merged = captioner.request(png, [(jpeg, "a green block")]).prompt.merged_image
        assert merged.size[0] == width, profile


def test_official_image_run_hands_its_generator_plain_loads(rotated_and_transparent, tmp_path):
    """An image run's ``image_loading`` reaches the generator's request: the retrieval baseline draws
    the top example as loaded, kept as stored (40x20) under ``plain``, upright (20x40) by default."""
    from unirag.data.records import Query
    from unirag.generators.pricing import Price
    from unirag.generators.registry import IMAGE, load_generator
    from unirag.pipelines.example_run import PreparedQuery
    from unirag.pipelines.image_gen import image_job, picture_settings
    from unirag.retrieval.results import Pair

    jpeg, _ = rotated_and_transparent
    generator = load_generator("retrieval:top1", IMAGE)
    for loading, size in (("plain", [40, 20]), ("normalised", [20, 40])):
        job = image_job(generator, tmp_path / loading, None, picture_settings(generator.spec), Price(), {},
                        image_loading=loading)
        query = Query(qid="q1", modality="text", txt="a green block")
        [fields] = job.work_batch([PreparedQuery(query, [Pair.of(jpeg, "x", "g")])], {})
        assert fields["size"] == size, loading
