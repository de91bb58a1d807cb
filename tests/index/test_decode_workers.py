"""Decode workers change nothing but speed: the same vectors, order, skipped-image report and shard files
for 0 (inline), 1 and 2 workers, with the real offline encoder (its preprocessing runs in the workers)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from unirag import Index
from unirag.data.mbeir import write_candidates
from unirag.data.records import Candidate, Modality
from unirag.encoders.registry import load_encoder
from unirag.errors import InputError, SkippedInputsWarning


@pytest.fixture(scope="module")
def offline():
    return load_encoder("offline", device="cpu", batch_size=4)


@pytest.fixture(scope="module")
def pool_with_bad_images(tmp_path_factory, coco_mini: Path) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("pool")
    (root / "images").mkdir()
    photos = sorted((coco_mini / "images").glob("*.jpg"))[:4]
    for p in photos:
        shutil.copy(p, root / "images" / p.name)
    (root / "images" / "corrupt.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    cands = []
    for i, p in enumerate(photos):
        cands.append(Candidate(f"img{i}", Modality.IMAGE, img_path=f"images/{p.name}"))
        cands.append(Candidate(f"txt{i}", Modality.TEXT, txt=f"caption number {i} of a photo"))
        if i == 1:
            cands.append(Candidate("bad-corrupt", Modality.IMAGE, img_path="images/corrupt.jpg"))
        if i == 2:
            cands.append(Candidate("bad-missing", Modality.IMAGE, img_path="images/missing.jpg"))
            cands.append(Candidate("fused5", Modality.IMAGE_TEXT, img_path=f"images/{p.name}", txt="a fused one"))
    write_candidates(root / "pool.jsonl", cands)
    return root / "pool.jsonl", root


def _index_contents(path: Path):
    index = Index.open(path)
    dids = [m.did for m in index.metas]
    return dids, index.vectors(list(range(len(dids)))), index.manifest["bad_images"]


@pytest.mark.slow  # tens of seconds on 2 cores: left out of make test-fast
def test_index_build_is_identical_across_decode_workers(offline, pool_with_bad_images, tmp_path) -> None:
    pool, root = pool_with_bad_images
    built = {}
    for workers in (0, 1, 2):
        offline.decode_workers = workers
        with pytest.warns(SkippedInputsWarning, match="2 input"):
            Index.build(pool, tmp_path / f"idx{workers}", encoder=offline, images_root=root, batch_size=3,
                        progress=False)
        built[workers] = _index_contents(tmp_path / f"idx{workers}")
    offline.decode_workers = None
    dids, vectors, bad = built[0]
    assert "bad-corrupt" not in dids and "bad-missing" not in dids and "fused5" in dids
    assert bad["count"] == 2
    assert [Path(b["path"]).name for b in bad["first"]] == ["corrupt.jpg", "missing.jpg"]
    for workers in (1, 2):
        assert built[workers][0] == dids
        assert built[workers][2] == bad
        np.testing.assert_array_equal(built[workers][1], vectors)


@pytest.mark.slow  # tens of seconds on 2 cores: left out of make test-fast
def test_shards_are_identical_across_decode_workers(offline, pool_with_bad_images, tmp_path) -> None:
    pool, root = pool_with_bad_images
    records = {}
    for workers in (0, 2):
        offline.decode_workers = workers
        shards = tmp_path / f"shards{workers}"
        records[workers] = [Index.embed_shard(pool, (i, 2), shards, encoder=offline, images_root=root,
                                              batch_size=3)
                            for i in range(2)]
    offline.decode_workers = None
    for i in range(2):
        a, b = records[0][i], records[2][i]
        assert (a["rows"], a["bad_images"]) == (b["rows"], b["bad_images"])
        assert (tmp_path / "shards0" / f"shard-0000{i}.ids").read_text() == \
            (tmp_path / "shards2" / f"shard-0000{i}.ids").read_text()
        np.testing.assert_array_equal(np.load(tmp_path / "shards0" / f"shard-0000{i}.npy"),
                                      np.load(tmp_path / "shards2" / f"shard-0000{i}.npy"))
    skipped = [b["did"] for r in records[2] for b in r["bad_images"]]
    assert skipped == ["bad-corrupt", "bad-missing"]
    done = json.loads((tmp_path / "shards2" / "shard-00000.done.json").read_text())
    assert done["rows"] + len(done["bad_images"]) == done["pool_rows"]


def test_query_images_are_identical_across_decode_workers(offline, pool_with_bad_images) -> None:
    _, root = pool_with_bad_images
    paths = [str(p) for p in sorted((root / "images").glob("0*.jpg"))[:3]]
    offline.decode_workers = 0
    inline = offline.encode_images(paths)
    offline.decode_workers = 2
    try:
        np.testing.assert_array_equal(offline.encode_images(paths), inline)
        fused = offline.encode_fused(paths, ["x"] * len(paths))
        with pytest.raises(InputError, match="corrupt.jpg: cannot decode image"):
            offline.encode_images(paths[:2] + [str(root / "images" / "corrupt.jpg")])
    finally:
        offline.decode_workers = 0
    np.testing.assert_array_equal(offline.encode_fused(paths, ["x"] * len(paths)), fused)
    offline.decode_workers = None


def test_cuda_batches_go_through_pinned_memory(monkeypatch) -> None:
    """No GPU here: the copy path is checked on a CPU tensor with pin_memory/to recorded."""
    import torch

    from unirag.runtime import host_to_device

    calls = []
    real_to = torch.Tensor.to

    def fake_pin(self):
        calls.append("pin")
        return self

    def fake_to(self, *args, **kwargs):
        calls.append(("to", args, kwargs))
        args = tuple("cpu" if str(a).startswith("cuda") else a for a in args)
        return real_to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "pin_memory", fake_pin)
    monkeypatch.setattr(torch.Tensor, "to", fake_to)
    out = host_to_device(np.ones((2, 3), np.float32), "cuda:0", torch.bfloat16)
    assert calls[0] == "pin" and calls[1] == ("to", ("cuda:0",), {"non_blocking": True})
    assert out.dtype == torch.bfloat16
    calls.clear()
    host_to_device(np.ones((2, 3), np.float32), "cpu", torch.float32)
    assert "pin" not in calls


def test_ray_actors_feed_their_gpus_with_the_spare_cpus() -> None:
    from unirag.runs.engine import EngineOptions

    class FakeRay:
        def __init__(self, cpus):
            self.cpus = cpus

        def cluster_resources(self):
            return {"CPU": self.cpus, "GPU": 8}

    def auto(cpus, actors, gpus, setting=None):
        options = EngineOptions(engine="ray", gpus_per_worker=gpus, decode_workers=setting)
        return options.actor_sizing(FakeRay(cpus), actors)[2]

    assert auto(64, 8, 1) == 7  # 8 CPUs per GPU actor, one for the actor
    assert auto(128, 1, 1) == 8  # capped
    assert auto(4, 8, 1) == 1  # at least one
    assert auto(64, 8, 0) == 0  # CPU-only actors decode inline
    assert auto(64, 8, 1, setting=3) == 3  # a setting is used as is


def test_blip_ff_fused_files_are_identical_across_decode_workers(coco_mini) -> None:
    """BLIP-FF fuses inside the model: its image+text path decodes files in the pool too."""
    from tiny_models import tiny_uniir_blip_ff

    enc = load_encoder(f"uniir:blip_ff:{tiny_uniir_blip_ff()}", device="cpu", batch_size=2, decode_workers=0)
    paths = [str(p) for p in sorted((coco_mini / "images").glob("*.jpg"))[:3]]
    texts = ["a dog", "two cats on a sofa", "a kitchen"]
    inline, images_inline = enc.encode_fused(paths, texts), enc.encode_images(paths)
    enc.decode_workers = 2
    try:
        np.testing.assert_array_equal(enc.encode_fused(paths, texts), inline)
        np.testing.assert_array_equal(enc.encode_images(paths), images_inline)
        assert enc.image_loader(3).preprocess is not None  # BLIP's image processor ran in the workers
    finally:
        enc.close()


def test_auto_gives_a_cpu_model_one_decode_worker(offline) -> None:
    """The offline encoder on the CPU: its threads use the cores, so auto decodes with one worker."""
    from unirag import runtime

    offline.decode_workers = None
    assert offline.device == "cpu"
    assert offline.image_loader(1000).workers == runtime.AUTO_WORKERS_CPU_MODEL == 1
    assert offline.image_loader(10).workers == 0  # small jobs inline, as for any model
