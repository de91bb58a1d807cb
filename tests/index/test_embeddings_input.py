"""Bring-your-own embeddings (.npy + ids, Parquet, shards folder) and the shard unit without Ray."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from index.helpers import build_from_vectors, clustered_vectors
from unirag.cli.main import main
from unirag.data.mbeir import write_candidates
from unirag.data.records import Candidate, Modality
from unirag.errors import InputError
from unirag.index.embeddings import build_from_embeddings
from unirag.index.handle import Index
from unirag.index.manifest import read_manifest

DIM = 16
ENC = {"name": "byo", "spec": "some/model", "dim": DIM, "config": {}, "fingerprint": "b" * 16}


@pytest.fixture()
def pool(tmp_path: Path) -> tuple[Path, list[Candidate], np.ndarray]:
    """A pool of 300 texts and 100 images (interleaved) and one normalised vector per candidate."""
    cands = []
    for i in range(400):
        if i % 4 == 3:
            cands.append(Candidate(f"img{i}", Modality.IMAGE, img_path=f"{i}.jpg", source_id=str(i // 4)))
        else:
            cands.append(Candidate(f"txt{i}", Modality.TEXT, txt=f"caption {i}", source_id=str(i // 4)))
    path = tmp_path / "pool.jsonl"
    write_candidates(path, cands)
    return path, cands, clustered_vectors(400, DIM, seed=3)


def _reference(tmp_path: Path, cands: list[Candidate], vectors: np.ndarray) -> Index:
    def chunks():
        for modality in (Modality.TEXT, Modality.IMAGE):
            rows = [i for i, c in enumerate(cands) if c.modality is modality]
            yield modality, [{"did": cands[i].did} for i in rows], vectors[rows]

    build_from_vectors(chunks(), tmp_path / "reference", DIM, ENC)
    return Index.open(tmp_path / "reference")


def _same_index(index: Index, reference: Index, cands: list[Candidate], vectors: np.ndarray) -> None:
    gids = [index.gid_of(c.did) for c in cands]
    np.testing.assert_allclose(index.vectors(gids), vectors, atol=1e-6)
    q = clustered_vectors(10, DIM, seed=9)
    for modality in ("text", "image", "any"):
        _, a = index.topk(q, 7, modality)
        _, b = reference.topk(q, 7, modality)
        assert [[index.metas[g].did for g in row] for row in a] == [[reference.metas[g].did for g in row] for row in b]
    meta = index.metas[index.gid_of("txt5")]
    assert (meta.txt, meta.source_id, meta.modality) == ("caption 5", "1", Modality.TEXT)


def test_npy_with_ids_in_any_order_and_without_ids(pool, tmp_path: Path) -> None:
    path, cands, vectors = pool
    reference = _reference(tmp_path, cands, vectors)
    order = np.random.default_rng(0).permutation(len(cands))
    np.save(tmp_path / "emb.npy", vectors[order] * 3.0)  # not normalised: the build normalises
    (tmp_path / "ids.txt").write_text("".join(f"{cands[i].did}\n" for i in order))
    manifest = build_from_embeddings(path, tmp_path / "emb.npy", tmp_path / "idx", ENC, ids=tmp_path / "ids.txt",
                                     progress=False)
    assert manifest["encoder"]["spec"] == "some/model" and manifest["counts"] == {"text": 300, "image": 100}
    _same_index(Index.open(tmp_path / "idx"), reference, cands, vectors)
    np.save(tmp_path / "pool_order.npy", vectors)
    build_from_embeddings(path, tmp_path / "pool_order.npy", tmp_path / "idx2", ENC, progress=False)
    _same_index(Index.open(tmp_path / "idx2"), reference, cands, vectors)
    assert not list(tmp_path.glob("idx*/data-*/.aligned.f32")), "temporary aligned file left behind"
    assert ".aligned.f32" not in manifest["files"]


def test_scratch_left_by_a_killed_build_is_removed_but_a_live_one_is_kept(pool, tmp_path: Path) -> None:
    """A killed build leaves its data folder with the aligned vectors (as large as the vectors); the next
    build removes it when its build lock is free, and never touches one whose lock is still held."""
    import fcntl
    import os

    path, cands, vectors = pool
    out = tmp_path / "idx"
    dead, live = out / "data-dead", out / "data-live"
    for folder in (dead, live):
        folder.mkdir(parents=True)
        (out / f"{folder.name}.lock").touch()
        (folder / ".aligned.f32").write_bytes(b"\0" * 4096)
    fd = os.open(out / "data-live.lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a build still running in another process holds its lock
    try:
        np.save(tmp_path / "emb.npy", vectors)
        build_from_embeddings(path, tmp_path / "emb.npy", out, ENC, progress=False)
        assert not dead.exists()
        assert (live / ".aligned.f32").exists()
    finally:
        os.close(fd)
    assert [p.parent.name for p in out.glob("*/.aligned.f32")] == [live.name]


def test_parquet_file_and_folder(pool, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path, cands, vectors = pool
    reference = _reference(tmp_path, cands, vectors)
    folder = tmp_path / "parts"
    folder.mkdir()
    for part, rows in enumerate(np.array_split(np.arange(len(cands))[::-1], 3)):  # reversed order, 3 files
        table = pa.table({"id": [cands[i].did for i in rows],
                          "embedding": pa.array(vectors[rows].tolist(), type=pa.list_(pa.float32()))})
        pq.write_table(table, folder / f"part-{part}.parquet")
    build_from_embeddings(path, folder, tmp_path / "idx", ENC, progress=False)
    _same_index(Index.open(tmp_path / "idx"), reference, cands, vectors)
    table = pa.table({"did": [c.did for c in cands],
                      "embedding": pa.array(vectors.tolist(), type=pa.list_(pa.float32()))})
    pq.write_table(table, tmp_path / "one.parquet")
    build_from_embeddings(path, tmp_path / "one.parquet", tmp_path / "idx2", ENC, progress=False)
    _same_index(Index.open(tmp_path / "idx2"), reference, cands, vectors)


def test_bad_embeddings_name_file_and_row(pool, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path, cands, vectors = pool
    ids = tmp_path / "ids.txt"
    ids.write_text("".join(f"{c.did}\n" for c in cands))

    def fails(emb, ids_file=ids, info=ENC) -> str:
        with pytest.raises(InputError) as e:
            build_from_embeddings(path, emb, tmp_path / "idx", info, ids=ids_file, progress=False)
        return str(e.value)

    np.save(tmp_path / "wide.npy", np.ones((400, DIM + 1), dtype=np.float32))
    err = fails(tmp_path / "wide.npy")
    assert "wide.npy" in err and "17 dimensions, expected 16" in err
    nan = vectors.copy()
    nan[123, 4] = np.nan
    np.save(tmp_path / "nan.npy", nan)
    err = fails(tmp_path / "nan.npy")
    assert "nan.npy" in err and "row 123 (id 'img123')" in err and "not finite" in err
    nan[7] = 0  # an all-zero row before the non-finite one: the first bad row is named
    np.save(tmp_path / "zero.npy", nan)
    err = fails(tmp_path / "zero.npy")
    assert "row 7 (id 'img7')" in err and "embedding is all zeros" in err
    np.save(tmp_path / "short.npy", vectors[:399])
    (tmp_path / "short.txt").write_text("".join(f"{c.did}\n" for c in cands[:399]))
    err = fails(tmp_path / "short.npy", tmp_path / "short.txt")
    assert "1 pool candidate(s) have no embedding, first 'img399'" in err and "short.npy" in err
    (tmp_path / "unknown.txt").write_text("".join(f"{c.did}\n" for c in cands[:200]) + "nobody\n"
                                          + "".join(f"{c.did}\n" for c in cands[201:]))
    err = fails(_save(tmp_path / "ok.npy", vectors), tmp_path / "unknown.txt")
    assert "unknown.txt:201" in err and "'nobody' is not a candidate of the pool" in err
    (tmp_path / "dup.txt").write_text("".join(f"{c.did}\n" for c in cands[:-1]) + "txt0\n")
    err = fails(tmp_path / "ok.npy", tmp_path / "dup.txt")
    assert "dup.txt:400" in err and "'txt0' has more than one embedding" in err
    err = fails(tmp_path / "ok.npy", tmp_path / "short.txt")
    assert "short.txt" in err and "400 rows in ok.npy but 399 ids" in err
    ragged = pa.table({"id": [c.did for c in cands],
                       "embedding": pa.array([v.tolist() if i != 77 else v[:8].tolist() for i, v in enumerate(vectors)],
                                             type=pa.list_(pa.float32()))})
    pq.write_table(ragged, tmp_path / "ragged.parquet")
    err = fails(tmp_path / "ragged.parquet", None)
    assert "ragged.parquet" in err and "row 77: embedding has 8 values" in err
    for column, row in (("id", 12), ("embedding", 30)):  # a null cell names its row and column
        holes = {"id": [None if i == row and column == "id" else c.did for i, c in enumerate(cands)],
                 "embedding": pa.array([None if i == row and column == "embedding" else v.tolist()
                                        for i, v in enumerate(vectors)], type=pa.list_(pa.float32()))}
        pq.write_table(pa.table(holes), tmp_path / f"no-{column}.parquet")
        assert f"row {row}: missing {column}" in fails(tmp_path / f"no-{column}.parquet", None)
    pq.write_table(pa.table({"key": ["x"]}), tmp_path / "noid.parquet")
    assert "no id column" in fails(tmp_path / "noid.parquet", None)
    assert not (tmp_path / "idx").exists()


def _save(path: Path, array: np.ndarray) -> Path:
    np.save(path, array)
    return path


@pytest.mark.slow  # tens of seconds on 2 cores: left out of make test-fast
def test_shards_cli_without_ray_then_build_from_the_folder(demo_mbeir: dict[str, Path], demo_images: Path,
                                                           tiny_encoder_spec: str, tmp_path: Path, capsys) -> None:
    """`--shard i/n` runs the shard unit alone; the folder then builds the same index as the local engine."""
    shards = tmp_path / "shards"
    base = ["index", "build", "--pool", str(demo_mbeir["pool"]), "--images-root", str(demo_images),
            "--encoder", tiny_encoder_spec]
    main(base + ["--out", str(tmp_path / "local")])
    for spec in ("0/3", "2/3"):
        main(base + ["--shards-dir", str(shards), "--shard", spec])
    assert "shard 2/3: 102 vectors embedded" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(base + ["--embeddings", str(shards), "--out", str(tmp_path / "idx")])
    assert "1 of 3 shards are not embedded yet (1/3)" in capsys.readouterr().err
    main(base + ["--shards-dir", str(shards), "--shard", "1/3"])
    main(base + ["--shards-dir", str(shards), "--shard", "1/3"])
    assert "already done" in capsys.readouterr().out
    with pytest.raises(SystemExit):  # a different cut of the same folder is refused
        main(base + ["--shards-dir", str(shards), "--shard", "0/4"])
    assert "planned for 3 shards" in capsys.readouterr().err
    main(["index", "build", "--pool", str(demo_mbeir["pool"]), "--embeddings", str(shards), "--out",
          str(tmp_path / "idx")])
    local, sharded = Index.open(tmp_path / "local"), Index.open(tmp_path / "idx")
    assert read_manifest(tmp_path / "idx")["encoder"]["fingerprint"] == local.manifest["encoder"]["fingerprint"]
    dids = [m.did for m in local.metas]
    assert sorted(dids) == sorted(m.did for m in sharded.metas)
    delta = np.abs(local.vectors([local.gid_of(d) for d in dids]) - sharded.vectors([sharded.gid_of(d) for d in dids]))
    assert delta.max() <= 1e-5
    # a corrupted shard is reported with its file and row
    bad = np.load(shards / "shard-00001.npy")
    bad[5, 0] = np.inf
    np.save(shards / "shard-00001.npy", bad)
    with pytest.raises(SystemExit):
        main(["index", "build", "--pool", str(demo_mbeir["pool"]), "--embeddings", str(shards), "--out",
              str(tmp_path / "idx3")])
    err = capsys.readouterr().err
    assert "shard-00001.npy" in err and "row 5" in err and "not finite" in err
