"""Image runs under ``official`` save JPEG at PIL's default quality, as the official run did."""

from __future__ import annotations

import io
import json

from click.testing import CliRunner
from PIL import Image

from unirag.cli.generate_images_cmd import generate_images


def _run(t2i_data, out, *extra: str):
    result = CliRunner().invoke(generate_images, ["--queries", str(t2i_data.queries), "--images-root",
                                                  str(t2i_data.root), "--generator", "retrieval:top1", "--mode", "rag",
                                                  "--k", "1", "--retrieval", str(t2i_data.run), "--out", str(out),
                                                  "--no-progress", *extra])
    assert result.exit_code == 0, result.output
    return [json.loads(x) for x in (out / "outputs.jsonl").read_text().splitlines()]


def test_official_image_runs_save_jpeg_at_pil_default_quality(t2i_data, tmp_path):
    """castorini/UniRAG src/unirag/image_generation_inference.py@e9a4e00:82-85 (infer_lavit) and :143-146
    (infer_emu2) save each picture with ``image.save(f"{qid}_{timestamp}.jpg")``: JPEG at PIL's default
    quality, 75. The FID/IS/CLIP figures of Tables 5-6 are of those JPEG files."""
    recs = _run(t2i_data, tmp_path / "official", "--profile", "official")
    reference = io.BytesIO()
    Image.new("RGB", (64, 64), "gray").save(reference, format="JPEG", quality=75)
    quality_75 = Image.open(reference).quantization
    for rec in recs:
        assert rec["status"] == "ok" and rec["image"].endswith(".jpg")
        path = tmp_path / "official" / rec["image"]
        with Image.open(path) as saved:
            assert saved.format == "JPEG" and saved.quantization == quality_75
    manifest = json.loads((tmp_path / "official" / "manifest.json").read_text())
    assert manifest["identity"]["image_format"] == "jpeg"

    recs = _run(t2i_data, tmp_path / "default")
    assert all(r["image"].endswith(".png") for r in recs)  # unirag's default: lossless PNG
    assert "image_format" not in json.loads((tmp_path / "default" / "manifest.json").read_text())["identity"]
