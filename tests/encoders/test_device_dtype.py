"""Device and precision: what "auto" means, weights identified by content (not path or dtype), GPU memory freed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from index.helpers import write_coco_mbeir
from tiny_models import tiny_clip_dir
from unirag import Index
from unirag.data.mbeir import read_queries
from unirag.encoders.registry import load_encoder
from unirag.errors import ConfigError
from unirag.retrieval.retriever import Retriever
from unirag.runtime import dtype_name, free_memory, resolve_device, weights_digest


@pytest.fixture()
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


def test_auto_device_and_dtype(no_gpu, monkeypatch):
    assert resolve_device("auto") == "cpu" and resolve_device(None) == "cpu"
    assert dtype_name("auto", "cpu") == "float32"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert dtype_name("auto", "cuda") == "bfloat16"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    assert dtype_name("auto", "cuda:1") == "float16"
    assert dtype_name("auto", "mps") == "float16"
    assert dtype_name("bf16", "cpu") == "bfloat16" and dtype_name("float32", "cuda") == "float32"


def test_unavailable_or_unknown_device_and_dtype_are_config_errors(no_gpu):
    with pytest.raises(ConfigError, match="CUDA is not available"):
        resolve_device("cuda")
    with pytest.raises(ConfigError, match="MPS"):
        resolve_device("mps")
    with pytest.raises(ConfigError, match="unknown torch device"):
        resolve_device("tpu-ish")
    with pytest.raises(ConfigError, match="unknown dtype"):
        dtype_name("int8", "cpu")
    with pytest.raises(ConfigError, match="float16"):
        dtype_name("float16", "cpu")


def test_auto_loads_on_cpu_in_float32_here(no_gpu):
    enc = load_encoder(str(tiny_clip_dir()))
    assert enc.device == "cpu" and enc.model.dtype == torch.float32
    assert enc.config()["dtype"] == "float32"


def test_weights_load_in_the_target_dtype(no_gpu):
    enc = load_encoder(str(tiny_clip_dir()), dtype="bfloat16")
    assert {p.dtype for p in enc.model.parameters()} == {torch.bfloat16}


def test_fingerprint_names_the_weights_not_path_or_dtype(tmp_path):
    base = load_encoder(str(tiny_clip_dir()), device="cpu", dtype="float32")
    copy = tmp_path / "same-weights-elsewhere"
    shutil.copytree(tiny_clip_dir(), copy)
    moved = load_encoder(str(copy), device="cpu", dtype="bfloat16")
    assert moved.name != base.name  # the manifest still records where it came from
    assert moved.fingerprint() == base.fingerprint()
    assert weights_digest(copy) == weights_digest(tiny_clip_dir())
    other = load_encoder(str(tiny_clip_dir(seed=1)), device="cpu")
    assert other.fingerprint() != base.fingerprint()


def test_index_built_in_float32_is_searched_in_bfloat16_with_the_same_top5(coco_mini: Path, tmp_path):
    files = write_coco_mbeir(coco_mini, tmp_path / "mbeir", n_images=12)
    out = tmp_path / "index"
    Index.build(files["pool"], out, encoder=str(tiny_clip_dir()), images_root=coco_mini, device="cpu",
                dtype="float32", progress=False)
    bf16 = load_encoder(str(tiny_clip_dir()), device="cpu", dtype="bfloat16")
    fp32 = Retriever(out, load_encoder(str(tiny_clip_dir()), device="cpu", dtype="float32"))
    low = Retriever(out, bf16)  # not refused: same weights, other precision
    pairs = []
    for direction, modality in (("i2t", "text"), ("t2i", "image")):
        queries = read_queries(files[direction])[:12]
        pairs += zip(fp32.retrieve(queries, 6, modality, query_images_root=coco_mini),
                     low.retrieve(queries, 6, modality, query_images_root=coco_mini), strict=True)
    # bfloat16 query vectors score every candidate within bfloat16 rounding of the float32 scores ...
    err = max(abs(c.score - {x.did: x.score for x in ra}[c.did])
              for ra, rb in pairs for c in rb if c.did in {x.did for x in ra})
    assert err < 0.02
    # ... so wherever rank 5 and rank 6 are further apart than twice that rounding, the top-5 is the same
    # (a random tiny model has near-ties, which rounding may legitimately swap).
    compared = 0
    for ra, rb in pairs:
        s = [c.score for c in ra]
        if s[4] - s[5] > 2 * err:
            compared += 1
            assert set(ra.dids[:5]) == set(rb.dids[:5]), ra.qid
    assert compared >= 4


def test_close_releases_the_model_and_empties_the_gpu_cache(monkeypatch):
    enc = load_encoder(str(tiny_clip_dir()), device="cpu")
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty"))
    enc.close()
    assert enc.model is None
    free_memory("cuda:0")
    assert calls == ["empty"]  # close() on a CPU encoder leaves the GPU cache alone; a CUDA device empties it
