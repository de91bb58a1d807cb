"""``--encoder python:MODULE:FACTORY``: a user's own encoder builds and searches an index, its identity
is the fingerprint, and its preprocessing runs in the decode workers."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest

from index.helpers import write_coco_mbeir
from unirag.cli.main import main
from unirag.encoders.registry import load_encoder
from unirag.errors import ConfigError
from unirag.retrieval.run_io import read_retrieval_run

FACTORY = textwrap.dedent('''
    """A user's encoder: colour statistics for images, letter counts for texts (dim 8)."""
    import numpy as np

    CALLS = {"embed_images": 0, "embed_preprocessed": 0, "options": None}


    def _stats(array):
        return np.concatenate([array.mean(axis=(1, 2)), array.std(axis=(1, 2)), [array.max(), array.min()]])


    def prepare(image):
        return np.asarray(image.resize((32, 32)), dtype=np.float32).transpose(2, 0, 1) / 255.0


    class ColourEncoder:
        dim = 8
        name = "colour-stats"

        def __init__(self, version=1):
            self.version = version

        def identity(self):
            return {"model": "colour-stats", "version": self.version}

        def embed_images(self, images):
            CALLS["embed_images"] += 1
            return np.stack([_stats(prepare(im)) for im in images])

        def embed_texts(self, texts):
            out = np.zeros((len(texts), 8), np.float32)
            for i, t in enumerate(texts):
                for ch in t.lower():
                    out[i, ord(ch) % 8] += 1
            return out + 0.01


    class PreprocessingColourEncoder(ColourEncoder):
        preprocess = staticmethod(prepare)

        def embed_preprocessed(self, batch):
            CALLS["embed_preprocessed"] += 1
            return np.stack([_stats(a) for a in batch])


    def make(device="auto", **options):
        CALLS["options"] = {"device": device, **options}
        return ColourEncoder()


    def make_v2():
        return ColourEncoder(version=2)


    def make_preprocessing(batch_size=None):
        return PreprocessingColourEncoder()


    def make_broken():
        return object()
''')


@pytest.fixture
def factory_module(tmp_path, monkeypatch):
    folder = tmp_path / "plugin_src"
    folder.mkdir()
    (folder / "user_colour_encoder.py").write_text(FACTORY)
    monkeypatch.syspath_prepend(str(folder))
    import importlib
    import sys

    sys.modules.pop("user_colour_encoder", None)
    module = importlib.import_module("user_colour_encoder")
    yield module
    sys.modules.pop("user_colour_encoder", None)


@pytest.fixture(scope="module")
def mbeir(coco_mini, tmp_path_factory) -> dict[str, Path]:
    return write_coco_mbeir(coco_mini, tmp_path_factory.mktemp("mbeir"), n_images=8)


def test_python_encoder_builds_and_searches_an_index(factory_module, mbeir, coco_mini, tmp_path) -> None:
    idx = tmp_path / "idx"
    main(["index", "build", "--pool", str(mbeir["pool"]), "--images-root", str(coco_mini), "--out", str(idx),
          "--encoder", "python:user_colour_encoder:make", "--device", "cpu", "--decode-workers", "0"])
    manifest = json.loads((idx / "manifest.json").read_text())
    assert manifest["encoder"]["spec"] == "python:user_colour_encoder:make"
    assert manifest["encoder"]["name"] == "colour-stats" and manifest["dim"] == 8
    assert manifest["counts"] == {"image": 8, "text": 40}
    assert factory_module.CALLS["options"] == {"device": "cpu", "dtype": "auto"}  # what the factory declares
    out = tmp_path / "run.jsonl"
    main(["retrieve", "--index", str(idx), "--queries", str(mbeir["i2t"]), "--images-root", str(coco_mini),
          "--k", "3", "--out", str(out), "--modality", "image"])
    results = read_retrieval_run(out)
    assert len(results) == 8
    # an image query finds its own photo first: the plugin's vectors went into the index and the query
    assert all(r[0].did == f"img:{qid.split(':')[1]}" for qid, r in results.items())


def test_identity_is_the_fingerprint(factory_module) -> None:
    a, b = load_encoder("python:user_colour_encoder:make"), load_encoder("python:user_colour_encoder:make_v2")
    assert a.identity()["plugin"] == {"model": "colour-stats", "version": 1}
    assert a.fingerprint() != b.fingerprint()
    assert a.fingerprint() == load_encoder("python:user_colour_encoder:make", device="cpu").fingerprint()
    vecs = a.encode_texts(["abc", "hello"])
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1, rtol=1e-5)  # unirag normalises


def test_preprocessing_runs_in_the_decode_workers_with_the_same_vectors(factory_module, coco_mini) -> None:
    enc = load_encoder("python:user_colour_encoder:make_preprocessing", decode_workers=0)
    paths = [str(p) for p in sorted((coco_mini / "images").glob("*.jpg"))[:6]]
    inline = enc.encode_images(paths)
    plain = load_encoder("python:user_colour_encoder:make").encode_images(paths)
    np.testing.assert_allclose(inline, plain, rtol=1e-5, atol=1e-6)  # same model either way
    assert factory_module.CALLS["embed_preprocessed"] > 0
    enc.decode_workers = 2
    try:
        np.testing.assert_array_equal(enc.encode_images(paths), inline)
        assert enc.image_loader(len(paths)).preprocess is factory_module.prepare  # sent to the workers
    finally:
        enc.close()


def test_bad_factories_are_config_errors(factory_module) -> None:
    with pytest.raises(ConfigError, match="without embed_images"):
        load_encoder("python:user_colour_encoder:make_broken")
    with pytest.raises(ConfigError, match="cannot import module"):
        load_encoder("python:no_such_module_here:make")
    with pytest.raises(ConfigError, match="no callable 'nope'"):
        load_encoder("python:user_colour_encoder:nope")
    with pytest.raises(ConfigError, match="MODULE:FACTORY"):
        load_encoder("python:just_a_module")
