"""``unirag evaluate images --profile official``: the images reach FID, CLIP Score and IS as the official
evaluation script feeds them (castorini/UniRAG src/unirag/eval_image_generation.py at commit e9a4e00).

The Inception network is injected (a recording extractor): what is tested is the pipeline around it."""

from __future__ import annotations

import json

import cv2  # part of unirag[image-metrics]
import numpy as np
import pytest
import torch
from click.testing import CliRunner
from eval_run_factory import coco_rows, write_image_task, write_run
from injected_features import PooledColour
from PIL import Image

from unirag.metrics.image_run import evaluate_image_run


class Recording(PooledColour):
    """PooledColour that keeps every uint8 batch it is given."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.seen: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(x.clone())
        return super().forward(x)

    def images(self) -> torch.Tensor:
        return torch.cat(self.seen)


@pytest.fixture(scope="module")
def run(tmp_path_factory, coco_mini):
    """6 caption queries; generated images are other COCO photos saved as JPEG; query 0 failed."""
    tmp = tmp_path_factory.mktemp("official_eval")
    rows = coco_rows(coco_mini, 12)
    queries, pool = write_image_task(tmp, rows[:6])
    out = tmp / "run"
    (out / "images").mkdir(parents=True)
    records = [{"qid": f"t:{rows[0]['image_id']}", "status": "error", "error": "CUDA out of memory", "image": None}]
    for i, r in enumerate(rows[1:6], start=1):
        Image.open(coco_mini / rows[6 + i]["image"]).convert("RGB").save(out / "images" / f"{i}.jpg")
        records.append({"qid": f"t:{r['image_id']}", "image": f"images/{i}.jpg"})
    write_run(out, records, {"task": "image", "generator": "diffusers:tiny", "mode": "zero-shot", "k": 0})
    return out, queries, pool, rows


def _official_view(path) -> torch.Tensor:
    """What the official load_images keeps of a file: cv2.imread (BGR) resized to 224x224 (:98-99)."""
    return torch.from_numpy(cv2.resize(cv2.imread(str(path)), (224, 224))).permute(2, 0, 1)


def test_official_profile_feeds_bgr_224_images_to_fid_and_299_copies_to_is(run, coco_mini):
    """eval_image_generation.py@e9a4e00: ``cv2.imread`` never converted to RGB (:98), ``cv2.resize(img,
    (224, 224))`` before FID and CLIP Score (:99, :155-169, :143-152), IS on ``cv2.resize(img, (299, 299))`` of
    the 224 images (:173); a query without a generated image is ``np.random.randint(256, size=(224, 224,
    3))`` noise (:102-104), so every query is scored."""
    out, queries, pool, rows = run
    fid, is_net = Recording(), Recording(10, 1)
    result = evaluate_image_run(out, queries, pool, coco_mini, fid_feature=fid, is_feature=is_net, clip_model=None,
                                is_splits=2, device="cpu", profile="official", batch_size=4, write=False)
    assert result["n_scored"] == 6 and result["n_noise_images"] == 1 and result["n_failed"] == 1
    assert "image_metric_channels" in result["profile"]["reproduces_official_bugs"]
    seen = fid.images()
    assert seen.shape == (12, 3, 224, 224)  # 6 real then 6 generated
    real = {tuple(t.flatten()[:64].tolist()) for t in seen[:6]}
    for r in rows[:6]:  # every real photo, as OpenCV reads it (BGR) at 224x224
        assert tuple(_official_view(coco_mini / r["image"]).flatten()[:64].tolist()) in real
    fakes = seen[6:]
    expected = [_official_view(out / "images" / f"{i}.jpg") for i in range(1, 6)]
    matched = sum(any(torch.equal(f, e) for f in fakes) for e in expected)
    assert matched == 5  # the five generated images, BGR, 224x224; the sixth is noise
    noise = [f for f in fakes if not any(torch.equal(f, e) for e in expected)]
    assert len(noise) == 1 and noise[0].float().std() > 60  # uniform random pixels (sd ~ 74)
    is_seen = is_net.images()
    assert is_seen.shape == (6, 3, 299, 299)
    for e in expected:
        want = torch.from_numpy(cv2.resize(e.permute(1, 2, 0).numpy(), (299, 299))).permute(2, 0, 1)
        assert any(torch.equal(t, want) for t in is_seen)


def test_default_profile_feeds_rgb_at_stored_size_and_excludes_failed_queries(run, coco_mini):
    out, queries, pool, rows = run
    fid = Recording()
    result = evaluate_image_run(out, queries, pool, coco_mini, fid_feature=fid, is_feature=Recording(10, 1),
                                clip_model=None, is_splits=2, device="cpu", write=False)
    assert result["n_scored"] == 5 and result["n_noise_images"] == 0
    seen = [img for batch in fid.seen for img in batch]
    assert len(seen) == 10  # 5 real, 5 generated: the failed query is left out
    first = torch.from_numpy(np.array(Image.open(coco_mini / rows[1]["image"]).convert("RGB"))).permute(2, 0, 1)
    assert any(torch.equal(t, first) for t in seen if t.shape == first.shape)  # RGB, not resized


def test_cli_takes_the_official_profile(run, coco_mini, monkeypatch):
    """``unirag evaluate images --profile official`` records the profile in metrics.json."""
    import unirag.metrics.images as images
    from unirag.cli.main import cli

    out, queries, pool, _ = run
    monkeypatch.setattr(images, "standard_inception", lambda weights, feature: PooledColour(
        10 if feature != "2048" else 8))
    res = CliRunner().invoke(cli, ["evaluate", "images", "--run", str(out), "--queries", str(queries), "--pool",
                                   str(pool), "--images-root", str(coco_mini), "--no-clip", "--device", "cpu",
                                   "--is-splits", "2", "--profile", "official"])
    assert res.exit_code == 0, res.output
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["profile"]["profile"] == "official" and saved["n_scored"] == 6
    assert set(saved["metrics"]) == {"FID", "IS", "IS SD"}
