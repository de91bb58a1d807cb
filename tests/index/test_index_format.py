"""Index format v2: sharded search, the atomic swap under kills, lock-based cleanup, plain IVF-PQ."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from index.helpers import build_from_vectors, clustered_vectors
from unirag.data.records import Modality, Query
from unirag.index.handle import Index
from unirag.index.manifest import read_manifest
from unirag.retrieval.retriever import Retriever

ENC = {"name": "vectors", "spec": None, "config": {}, "fingerprint": "f" * 16}
SRC = str(Path(__file__).resolve().parents[2] / "src")


def _chunks(parts: list[tuple[Modality, np.ndarray]], size: int = 700):
    for modality, vectors in parts:
        for s in range(0, len(vectors), size):
            block = vectors[s : s + size]
            yield modality, [{"did": f"{modality.value}:{s + i}"} for i in range(len(block))], block


def test_sharded_flat_search_equals_single_shard_exact(tmp_path: Path) -> None:
    text, image = clustered_vectors(2500, 32, seed=0), clustered_vectors(1800, 32, seed=2)
    parts = [(Modality.TEXT, text), (Modality.IMAGE, image)]
    one = build_from_vectors(_chunks(parts), tmp_path / "one", 32, ENC)
    many = build_from_vectors(_chunks(parts), tmp_path / "many", 32, ENC, params={"shard_size": 400})
    assert len(one["subindexes"]["text"]["shards"]) == 1
    assert [s["count"] for s in many["subindexes"]["text"]["shards"]] == [400] * 6 + [100]
    assert len(many["subindexes"]["image"]["shards"]) == 5
    queries = clustered_vectors(40, 32, seed=5)
    a, b = Index.open(tmp_path / "one"), Index.open(tmp_path / "many")
    for modality in ("text", "image", "any"):
        sa, ia = a.topk(queries, 25, modality)
        sb, ib = b.topk(queries, 25, modality)
        np.testing.assert_array_equal(ia, ib)
        np.testing.assert_allclose(sa, sb, atol=1e-6)
    # the exact answer, computed here without FAISS
    truth = np.argsort(-(queries @ text.T), axis=1, kind="stable")[:, :25]
    _, got = b.topk(queries, 25, "text")
    assert np.mean([len(set(t) & set(g)) for t, g in zip(truth, got, strict=True)]) >= 24.9
    # global ids map to the right metadata and vectors across shard boundaries
    gid = b.gid_of("text:1234")
    assert b.metas[gid].did == "text:1234"
    np.testing.assert_allclose(b.vectors([gid])[0], text[1234], atol=1e-6)
    # k larger than a shard, and larger than the pool
    s, g = b.topk(queries[:1], 2000, "image")
    assert (g[0, :1800] >= 0).all() and (g[0, 1800:] == -1).all() and np.isinf(s[0, 1800:]).all()


def test_sharded_ivfpq_trains_once_and_keeps_recall(tmp_path: Path) -> None:
    data = clustered_vectors(9000, 32, seed=0)
    manifest = build_from_vectors(_chunks([(Modality.TEXT, data)], 1000), tmp_path / "ivf", 32, ENC, "ivfpq",
                                  {"shard_size": 4000, "nprobe": 64, "refine_k_factor": 32})
    entry = manifest["subindexes"]["text"]
    assert entry["type"] == "ivfpq" and [s["count"] for s in entry["shards"]] == [4000, 4000, 1000]
    assert entry["vectors_file"] == "text.vectors.f32"
    index = Index.open(tmp_path / "ivf")
    queries = clustered_vectors(60, 32, seed=7)
    truth = np.argsort(-(queries @ data.T), axis=1)[:, :10]
    scores, got = index.topk(queries, 10, "text")
    recall = np.mean([len(set(t) & set(g)) / 10 for t, g in zip(truth, got, strict=True)])
    assert recall >= 0.9, recall
    # re-scored from the raw vectors: the scores are exact inner products
    np.testing.assert_allclose(scores, np.einsum("qkd,qd->qk", data[got], queries), atol=1e-5)


def test_plain_ivfpq_keeps_a_direct_map_so_pairs_complete(tmp_path: Path) -> None:
    text, image = clustered_vectors(4500, 32, seed=0), clustered_vectors(4500, 32, seed=1)
    manifest = build_from_vectors(_chunks([(Modality.TEXT, text), (Modality.IMAGE, image)]), tmp_path / "idx",
                                  32, ENC, "ivfpq", {"refine": False})
    assert {e["type"] for e in manifest["subindexes"].values()} == {"ivfpq"}
    assert all(e["vectors_file"] is None for e in manifest["subindexes"].values())
    assert not list((tmp_path / "idx").rglob("*.f32")), "refine=false keeps no raw vectors"
    index = Index.open(tmp_path / "idx")
    approx = index.vectors([index.gid_of("text:10")])[0]
    assert float(approx @ text[10]) > 0.9  # decoded from the PQ codes
    queries = [Query(f"q{i}", Modality.IMAGE, img_path=f"/nowhere/{i}.jpg") for i in range(5)]
    results = Retriever(index).retrieve_vectors(queries, image[:5], k=3, modality="text")
    for r in results:
        assert len(r) == 3 and len(r.pairs) == 3
        assert {p.via for p in r.pairs} == {"retrieval"}


def _run_build_killed_at(out: Path, name: str, when: str) -> subprocess.CompletedProcess:
    """Rebuild ``out`` in a real process that SIGKILLs itself just before/after the manifest swap."""
    script = textwrap.dedent(f"""
        import os, signal
        import numpy as np
        from unirag.data.records import Modality
        from unirag.index import directory
        from unirag.index.writer import IndexWriter
        real_replace = os.replace
        def replace(src, dst):
            if str(dst).endswith("manifest.json"):
                if {when!r} == "before":
                    os.kill(os.getpid(), signal.SIGKILL)
                real_replace(src, dst)
                os.kill(os.getpid(), signal.SIGKILL)
            return real_replace(src, dst)
        directory.os.replace = replace
        v = np.eye(8, dtype=np.float32)
        with IndexWriter({str(out)!r}, 8, {{"name": {name!r}, "fingerprint": "x", "config": {{}}}}) as writer:
            writer.add(Modality.TEXT, [{{"did": str(i)}} for i in range(8)], v)
            writer.commit()
    """)
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)


def _build(out: Path, name: str, n: int = 8) -> dict:
    v = np.eye(8, dtype=np.float32)[np.arange(n) % 8]
    return build_from_vectors([(Modality.TEXT, [{"did": f"{name}{i}"} for i in range(n)], v)], out, 8,
                              {"name": name, "fingerprint": "x", "config": {}})


@pytest.mark.parametrize("when,survivor", [("before", "first"), ("after", "second")])
def test_build_killed_at_the_swap_leaves_a_readable_index(tmp_path: Path, when: str, survivor: str) -> None:
    out = tmp_path / "idx"
    _build(out, "first", n=5)
    reader = Index.open(out)  # a reader that opened the old index before the rebuild
    proc = _run_build_killed_at(out, "second", when)
    assert proc.returncode == -9, proc.stderr
    index = Index.open(out)
    assert index.manifest["encoder"]["name"] == survivor
    assert len(index) == (5 if survivor == "first" else 8)
    assert len(list(out.glob("data-*/"))) == 2  # the killed process could not clean up
    assert reader.topk(np.eye(8, dtype=np.float32)[:1], 1)[1][0, 0] == 0
    # the next build removes the dead build's folder (its lock is free) and keeps only its own
    third = _build(out, "third")
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("data-")) == [third["data"]]
    assert sorted(p.name for p in out.iterdir()) == [".lock", third["data"], "manifest.json"]
    # readers that opened before the swap keep working after the old files are deleted
    assert reader.topk(np.eye(8, dtype=np.float32)[:1], 1)[1][0, 0] == 0
    assert reader.metas[0].did == "first0"


def test_cleanup_keeps_a_folder_whose_build_lock_is_held(tmp_path: Path) -> None:
    """Ownership by lock, not pid: a concurrent build's folder survives another build's cleanup."""
    out = tmp_path / "idx"
    _build(out, "first")
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import fcntl, os, sys, time
        os.mkdir({str(out / "data-live")!r})
        fd = os.open({str(out / "data-live.lock")!r}, os.O_RDWR | os.O_CREAT)
        fcntl.flock(fd, fcntl.LOCK_EX)
        print("locked", flush=True)
        time.sleep(120)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        (out / "data-dead").mkdir()  # a killed build: folder left, lock file free
        (out / "data-dead.lock").touch()
        second = _build(out, "second")
        names = {p.name for p in out.iterdir()}
        assert "data-live" in names and "data-live.lock" in names
        assert "data-dead" not in names and "data-dead.lock" not in names
        assert read_manifest(out)["data"] == second["data"]
    finally:
        holder.kill()
        holder.wait()
    with open(out / "data-live.lock") as f:  # the holder's death released its lock
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    third = _build(out, "third")
    assert sorted(p.name for p in out.iterdir()) == [".lock", third["data"], "manifest.json"]


def test_refuses_to_build_into_a_foreign_folder(tmp_path: Path) -> None:
    from unirag.errors import InputError

    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("precious")
    with pytest.raises(InputError, match="holds no unirag index"):
        _build(tmp_path / "mine", "x")
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["thesis.tex"]
