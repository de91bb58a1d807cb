"""Index build: streaming, atomic, bad images, manifest contents (real COCO mini data)."""

from __future__ import annotations

import shutil
import weakref
from pathlib import Path

import numpy as np
import pytest

from index.helpers import HashEncoder, coco_oracle
from unirag import Index
from unirag.data import images as images_mod
from unirag.data.mbeir import write_candidates
from unirag.data.records import Candidate, Modality
from unirag.errors import ConfigError, InputError, SkippedInputsWarning
from unirag.index.manifest import read_manifest, sha256_file
from unirag.index.writer import IndexWriter


def test_build_records_counts_encoder_and_checksums(coco_index: Path, coco_oracle_encoder) -> None:
    manifest = read_manifest(coco_index)
    assert manifest["counts"] == {"text": 255, "image": 51}  # the committed coco-mini fixture
    assert manifest["total"] == 306
    assert manifest["encoder"]["name"] == "test-coco-oracle"
    assert manifest["encoder"]["fingerprint"] == coco_oracle_encoder.fingerprint()
    assert manifest["dim"] == coco_oracle_encoder.dim
    assert manifest["index_type"] == "flat"
    assert manifest["bad_images"]["count"] == 0
    data = coco_index / manifest["data"]
    assert sorted(manifest["files"]) == sorted(p.name for p in data.iterdir())
    for name, entry in manifest["files"].items():
        assert sha256_file(data / name) == entry["sha256"] and (data / name).stat().st_size == entry["size"]
    # metadata row i of a modality describes vector i of that modality's sub-index, in pool order
    index = Index.open(coco_index)
    first_text = index.metas[index.offsets[Modality.TEXT]]
    assert first_text == Candidate("txt:397133:0", Modality.TEXT, "A man is in a kitchen making pizzas.", None,
                                   source_id="397133")


def test_build_vectors_match_the_encoder(coco_index: Path, coco_mbeir, coco_oracle_encoder) -> None:
    index = Index.open(coco_index, coco_oracle_encoder)
    gid = index.gid_of("txt:397133:0")
    expected = coco_oracle_encoder.encode_texts(["A man is in a kitchen making pizzas."])[0]
    np.testing.assert_allclose(index.vectors([gid])[0], expected, atol=1e-6)


def test_build_streams_in_bounded_chunks(coco_mini: Path, coco_mbeir, tmp_path: Path, monkeypatch) -> None:
    encoder = coco_oracle(coco_mini, n_images=40)
    pool = tmp_path / "pool.jsonl"
    lines = coco_mbeir["pool"].read_text().splitlines()[: 40 * 6]
    pool.write_text("\n".join(lines) + "\n")
    refs: list[weakref.ref] = []
    peak = [0]
    real_load = images_mod.load_rgb

    def counting_load(path):
        im = real_load(path)
        refs.append(weakref.ref(im))
        peak[0] = max(peak[0], sum(r() is not None for r in refs))
        return im

    monkeypatch.setattr(images_mod, "load_rgb", counting_load)
    encoder.batch_size = 4
    encoder.decode_workers = 0  # inline, so the counting loader sees every decode
    Index.build(pool, tmp_path / "idx", encoder=encoder, images_root=coco_mini, batch_size=8, progress=False)
    # 40 images and 200 captions arrive as chunks of at most 8, encoded in batches of at most 4
    assert max(encoder.image_batches) <= 4 and sum(encoder.image_batches) == 40
    assert len(encoder.image_batches) >= 10
    assert max(encoder.text_batches) <= 4 and sum(encoder.text_batches) == 200
    assert peak[0] <= 8, f"{peak[0]} decoded images alive at once; the build must hold one chunk at most"


def test_bad_images_are_reported_and_skipped(coco_mini: Path, tmp_path: Path) -> None:
    images = tmp_path / "images"
    images.mkdir()
    shutil.copy(coco_mini / "images" / "000000000802.jpg", images / "good.jpg")
    (images / "corrupt.jpg").write_bytes(b"\xff\xd8\xff\xe0 definitely not a jpeg")
    write_candidates(tmp_path / "pool.jsonl", [
        Candidate("i1", Modality.IMAGE, img_path="good.jpg"),
        Candidate("i2", Modality.IMAGE, img_path="corrupt.jpg"),
        Candidate("i3", Modality.IMAGE, img_path="missing.jpg"),
        Candidate("t1", Modality.TEXT, txt="a living room with a television"),
    ])
    with pytest.warns(SkippedInputsWarning, match="2 input"):
        manifest = Index.build(tmp_path / "pool.jsonl", tmp_path / "idx", encoder=HashEncoder(),
                               images_root=images, progress=False).manifest
    assert manifest["counts"] == {"image": 1, "text": 1}
    bad = manifest["bad_images"]
    assert bad["count"] == 2
    assert {Path(b["path"]).name for b in bad["first"]} == {"corrupt.jpg", "missing.jpg"}
    assert read_manifest(tmp_path / "idx")["bad_images"]["count"] == 2
    index = Index.open(tmp_path / "idx")
    assert [m.did for m in index.metas] == ["i1", "t1"]


def test_fused_candidates_are_indexed(coco_mini: Path, tmp_path: Path) -> None:
    write_candidates(tmp_path / "pool.jsonl", [
        Candidate("f1", Modality.IMAGE_TEXT, txt="a kitchen", img_path="images/000000397133.jpg")])
    encoder = HashEncoder()
    manifest = Index.build(tmp_path / "pool.jsonl", tmp_path / "idx", encoder=encoder, images_root=coco_mini,
                           progress=False).manifest
    assert manifest["counts"] == {"image,text": 1}
    assert (tmp_path / "idx" / manifest["data"] / "image_text.00000.faiss").exists()


def test_crash_mid_build_keeps_previous_index(coco_mbeir, coco_mini: Path, tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "idx"
    Index.build(coco_mbeir["pool"], out, encoder=HashEncoder(), images_root=coco_mini, progress=False)
    before = _tree(out)
    calls = [0]
    real_add = IndexWriter.add

    def crashing_add(self, *args, **kwargs):
        calls[0] += 1
        if calls[0] == 5:
            raise RuntimeError("simulated crash mid-build")
        return real_add(self, *args, **kwargs)

    monkeypatch.setattr(IndexWriter, "add", crashing_add)
    with pytest.raises(RuntimeError, match="simulated crash"):
        Index.build(coco_mbeir["pool"], out, encoder=HashEncoder(name="other"), images_root=coco_mini,
                    progress=False)
    assert _tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"], "temporary build directory left behind"
    assert Index.open(out).manifest["encoder"]["name"] == "test-hash"


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_crash_without_previous_index_leaves_nothing(coco_mbeir, coco_mini: Path, tmp_path: Path,
                                                     monkeypatch) -> None:
    def crash(self, extra=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(IndexWriter, "commit", crash)
    with pytest.raises(KeyboardInterrupt):
        Index.build(coco_mbeir["pool"], tmp_path / "idx", encoder=HashEncoder(), images_root=coco_mini,
                    progress=False)
    assert list(tmp_path.iterdir()) == []


def test_rebuild_replaces_index(coco_mbeir, coco_mini: Path, tmp_path: Path) -> None:
    out = tmp_path / "idx"
    Index.build(coco_mbeir["pool"], out, encoder=HashEncoder(), images_root=coco_mini, progress=False)
    first_data = read_manifest(out)["data"]
    Index.build(coco_mbeir["pool"], out, encoder=HashEncoder(name="second"), images_root=coco_mini,
                progress=False)
    manifest = read_manifest(out)
    assert manifest["encoder"]["name"] == "second" and manifest["data"] != first_data
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]
    assert sorted(p.name for p in out.iterdir()) == [".lock", manifest["data"], "manifest.json"]


def test_bad_pool_inputs(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="candidate pool not found"):
        Index.build(tmp_path / "nope.jsonl", tmp_path / "idx", encoder=HashEncoder(), progress=False)
    write_candidates(tmp_path / "dup.jsonl", [Candidate("a", Modality.TEXT, txt="x"),
                                              Candidate("a", Modality.TEXT, txt="y")])
    with pytest.raises(InputError, match="duplicate did 'a'"):
        Index.build(tmp_path / "dup.jsonl", tmp_path / "idx", encoder=HashEncoder(), progress=False)
    (tmp_path / "bad.jsonl").write_text('{"did": "a", "modality": "text", "txt": "x"}\n{"did": "b", "modality": "text"}\n')
    with pytest.raises(InputError) as e:
        Index.build(tmp_path / "bad.jsonl", tmp_path / "idx", encoder=HashEncoder(), progress=False)
    assert "bad.jsonl:2" in str(e.value) and "txt" in str(e.value)
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(InputError, match="nothing to index"):
        Index.build(tmp_path / "empty.jsonl", tmp_path / "idx", encoder=HashEncoder(), progress=False)
    with pytest.raises(ConfigError, match="batch_size must be positive"):
        Index.build(tmp_path / "dup.jsonl", tmp_path / "idx", encoder=HashEncoder(), batch_size=0,
                    progress=False)
    # the engine's options are checked before any model loads, by the engine options every run uses
    for engine, options, message in [("spark", {}, "unknown engine"), ("local", {"workers": 2}, "go with --engine ray"),
                                     ("ray", {"workers": 0}, "--workers must be >= 1"),
                                     ("local", {"shard_size": 10}, "--shard-size goes with --engine ray"),
                                     ("ray", {"shard_size": 0}, "must be positive, got 0")]:
        with pytest.raises(ConfigError, match=message):
            Index.build(tmp_path / "dup.jsonl", tmp_path / "idx", encoder="nonexistent-model", engine=engine,
                        progress=False, **options)
    assert not (tmp_path / "idx").exists()
