"""FID, IS and CLIP Score with the image files decoded in decode workers: the same numbers as inline
decoding, and the process that runs the networks decodes no image file."""

from __future__ import annotations

import pytest
from eval_run_factory import coco_rows
from injected_features import PooledColour
from PIL import Image

from tiny_models import tiny_clip_dir
from unirag.errors import InputError
from unirag.metrics import images as im
from unirag.runs.engine import EngineOptions


@pytest.fixture(scope="module")
def photo_sets(coco_mini, tmp_path_factory):
    """Two sets of 12 COCO photos; one of the generated set saved at another size (its own batch)."""
    rows = coco_rows(coco_mini, 24)
    real = [coco_mini / r["image"] for r in rows[:12]]
    fake = [coco_mini / r["image"] for r in rows[12:]]
    odd = tmp_path_factory.mktemp("odd") / "odd.png"
    Image.open(fake[3]).convert("RGB").resize((64, 48)).save(odd)
    fake[3] = odd
    return real, fake, [r["captions"][0] for r in rows[12:]]


@pytest.mark.slow  # tens of seconds on 2 cores: left out of make test-fast
def test_fid_is_and_clip_score_are_the_same_with_decode_workers(photo_sets, decoded_here):
    real, fake, texts = photo_sets
    clip = im.load_clip(tiny_clip_dir())
    got = {}
    for workers in (0, 2):
        decoded_here.clear()
        engine = EngineOptions(decode_workers=workers)
        fid = im.frechet_distance(real, fake, PooledColour(), batch_size=5, engine=engine)
        iscore = im.inception_score(real + fake, PooledColour(10, 1), splits=3, seed=3, batch_size=4, engine=engine)
        clip_score = im.clip_scores(fake, texts, clip, engine=engine)
        batches = [tuple(b.shape) for b in im.size_batches(fake, 4, engine)]
        got[workers] = (fid, iscore, clip_score, batches, list(decoded_here))
    assert len(got[0][4]) == 2 * (12 + 12) + 12 + 12  # FID, IS, CLIP Score, size_batches: each file decoded here
    assert got[2][4] == []
    assert got[2][:4] == got[0][:4]
    assert got[0][0] > 0.01 and got[0][1][0] > 1.0
    assert (1, 3, 48, 64) in got[0][3]  # the odd-sized image stays in a batch of its own


def test_an_unreadable_file_fails_the_metric_with_the_inline_message(photo_sets, tmp_path):
    real, fake, _ = photo_sets
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not a png")
    messages = {}
    for workers in (0, 2):
        with pytest.raises(InputError) as e:
            im.inception_score([*fake[:5], bad, *fake[5:]], PooledColour(10, 1), splits=2, batch_size=4,
                               engine=EngineOptions(decode_workers=workers))
        messages[workers] = str(e.value)
    assert "bad.png" in messages[0] and "cannot decode image" in messages[0]
    assert messages[2] == messages[0]
