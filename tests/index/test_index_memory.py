"""``Index.open(path, memory="ram")``: the FAISS files are read into memory and search answers exactly as
on the memory-mapped index; ``--index-memory`` on retrieve and serve."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import unirag
from index.helpers import build_from_vectors
from unirag.cli.main import main
from unirag.errors import ConfigError
from unirag.index import store
from unirag.retrieval.run_io import read_retrieval_run


@pytest.fixture(scope="module")
def vector_index(tmp_path_factory) -> Path:
    rng = np.random.default_rng(0)
    out = tmp_path_factory.mktemp("memidx") / "idx"
    chunks = []
    for modality, n in ((unirag.Modality.TEXT, 300), (unirag.Modality.IMAGE, 200)):
        vecs = rng.standard_normal((n, 32)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        metas = [{"did": f"{modality.value}-{i}", "txt": "t" if modality is unirag.Modality.TEXT else None,
                  "img_path": "x.jpg" if modality is unirag.Modality.IMAGE else None, "source_id": None}
                 for i in range(n)]
        chunks.append((modality, metas, vecs))
    build_from_vectors(chunks, out, 32, {"name": "vectors", "spec": None, "dim": 32, "fingerprint": None})
    return out


def test_ram_and_mmap_answer_the_same(vector_index) -> None:
    import faiss

    queries = np.random.default_rng(1).standard_normal((64, 32)).astype(np.float32)
    mapped = unirag.Index.open(vector_index)
    in_ram = unirag.Index.open(vector_index, memory="ram")
    assert mapped.memory == "mmap" and in_ram.memory == "ram"
    assert in_ram.search(queries, k=7) == mapped.search(queries, k=7)
    assert in_ram.search(queries, k=5, modality="image") == mapped.search(queries, k=5, modality="image")
    # read into memory: the FAISS object owns its codes (a mapped flat index does not)
    index, _ = in_ram.subs[unirag.Modality.TEXT].shards[0]
    assert faiss.downcast_index(index).codes.size() == 300 * 32 * 4
    assert unirag.Index.from_dict(in_ram.to_dict()).memory == "ram"
    with pytest.raises(ConfigError, match="unknown index memory mode 'disk'"):
        unirag.Index.open(vector_index, memory="disk")


def test_auto_memory_follows_what_is_available(vector_index, monkeypatch) -> None:
    monkeypatch.setattr(store, "available_memory", lambda: 10**12)
    assert unirag.Index.open(vector_index, memory="auto").memory == "ram"
    monkeypatch.setattr(store, "available_memory", lambda: 1000)  # the files take more than half of it
    assert unirag.Index.open(vector_index, memory="auto").memory == "mmap"
    monkeypatch.setattr(store, "available_memory", lambda: None)
    assert unirag.Index.open(vector_index, memory="auto").memory == "mmap"
    assert unirag.Index.open(vector_index, memory="ram").memory == "ram"


def test_retrieve_and_serve_take_index_memory(coco_mini, tmp_path, monkeypatch) -> None:
    from index.helpers import write_coco_mbeir
    from tiny_models import tiny_clip_dir
    from unirag.serve.engine import Engine
    from unirag.serve.settings import ServeSettings

    mbeir = write_coco_mbeir(coco_mini, tmp_path / "mbeir", n_images=6)
    idx = tmp_path / "idx"
    main(["index", "build", "--pool", str(mbeir["pool"]), "--images-root", str(coco_mini), "--out", str(idx),
          "--encoder", tiny_clip_dir(), "--device", "cpu"])
    runs = {}
    for memory in ("mmap", "ram"):
        out = tmp_path / f"{memory}.jsonl"
        main(["retrieve", "--index", str(idx), "--queries", str(mbeir["i2t"]), "--images-root", str(coco_mini),
              "--k", "3", "--out", str(out), "--device", "cpu", "--index-memory", memory])
        runs[memory] = read_retrieval_run(out)
    assert len(runs["ram"]) == 6 and runs["ram"] == runs["mmap"]
    with pytest.raises(SystemExit) as e:
        main(["retrieve", "--index", str(idx), "--queries", str(mbeir["i2t"]), "--k", "2",
              "--out", str(tmp_path / "x.jsonl"), "--index-memory", "disk"])
    assert e.value.code == 2
    monkeypatch.setattr(store, "available_memory", lambda: 10**12)
    engine = Engine(ServeSettings(index=idx, generator=None, image_generator=None))
    assert engine.index.memory == "ram"  # serve's default: ram when the index fits
    engine = Engine(ServeSettings(index=idx, generator=None, image_generator=None, index_memory="mmap"))
    assert engine.index.memory == "mmap"
    with pytest.raises(ConfigError, match="unknown index memory mode 'disk'"):  # checked once, by the index store
        Engine(ServeSettings(index=idx, generator=None, image_generator=None, index_memory="disk"))
