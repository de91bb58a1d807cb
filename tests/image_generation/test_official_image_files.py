"""Image runs under ``official`` save JPEG at PIL's default quality, as the official run did."""

from __future__ import annotations

import io
import json

from click.testing import CliRunner
from PIL import Image

from unirag.cli.generate_images_cmd import generate_images


def _run(t2i_data, out, *extra: str):
    result = CliRunner().invoke(generate_images, ["--queries", str(t2i_data.queries), "--pool-images-root",
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


def test_official_top1_image_is_the_top_candidates_own_else_its_complements_else_noise(t2i_data, tmp_path):
    """castorini/UniRAG src/unirag/eval_image_generation.py@e9a4e00:108-140 (load_retrieved_images): the
    baseline image is ``candidates[0]["img_path"]`` (:113-122), else ``complement_candidates[0]["img_path"]``
    (:123-133), else random noise (:134-139) - never a later hit's pair. Query 0's top hit is a caption
    whose pair the run did not keep (its image is its source item's); query 1's top hit is a caption of an
    item with no image."""
    from unirag.retrieval.results import Hit, Hits, Pair
    from unirag.retrieval.run_io import write_retrieval_run

    recs = t2i_data.records
    a, b = (str(recs[i]["image_id"]) for i in (1, 2))
    pool = tmp_path / "pool.jsonl"
    pool.write_text(t2i_data.pool.read_text() + json.dumps(
        {"did": "txt:orphan", "txt": "a caption of nothing", "img_path": None, "modality": "text",
         "src_content": json.dumps({"source_id": "orphan"})}) + "\n")
    later = Pair(image_did=f"img:{b}", text_did=f"txt:{b}", img_path=recs[2]["image"], txt=recs[2]["captions"][1],
                 score=0.5, via="pairing")
    q0, q1 = (f"coco:{recs[i]['image_id']}" for i in (0, 1))
    run = tmp_path / "run.jsonl"
    write_retrieval_run(run, [
        Hits(qid=q0, hits=[Hit(did=f"txt:{a}", score=0.9, modality="text"),
                           Hit(did=f"img:{b}", score=0.5, modality="image")], pairs=[later]),
        Hits(qid=q1, hits=[Hit(did="txt:orphan", score=0.9, modality="text"),
                           Hit(did=f"img:{b}", score=0.5, modality="image")], pairs=[later])])
    queries = tmp_path / "queries.jsonl"
    queries.write_text("".join(line + "\n" for line in t2i_data.queries.read_text().splitlines()[:2]))

    def run_with(*extra):
        out = tmp_path / ("out" + "".join(extra))
        result = CliRunner().invoke(generate_images, ["--queries", str(queries), "--pool-images-root", str(t2i_data.root),
                                                      "--generator", "retrieval:top1", "--mode", "rag", "--k", "1",
                                                      "--retrieval", str(run), "--pool", str(pool), "--out", str(out),
                                                      "--no-progress", *extra])
        assert result.exit_code == 0, result.output
        return out, {r["qid"]: r for r in map(json.loads, (out / "outputs.jsonl").read_text().splitlines())}

    out, recs_official = run_with("--profile", "official")
    assert recs_official[q0]["meta"]["source"] == f"img:{a}"  # the top caption's own image, not the kept pair's
    with Image.open(out / recs_official[q0]["image"]) as got, Image.open(t2i_data.root / recs[1]["image"]) as want:
        assert got.size == want.size
    assert recs_official[q1]["meta"]["source"] == "noise"
    with Image.open(out / recs_official[q1]["image"]) as noise:
        assert noise.size == (224, 224)
    _, recs_default = run_with()
    assert {r["meta"]["source"] for r in recs_default.values()} == {f"img:{b}"}  # unirag: the first kept pair
