"""Index builds on the files people have: phone photos, 16-bit and transparent PNGs, a bomb, a full disk.

Before the one loader: the EXIF copy embedded sideways (cosine ~0.73), the 16-bit PNG white
(~0.53), the cut-out product on black (~0.70); one bomb stopped the build with PIL's
DecompressionBombError and no index; a full disk ended in a 30-line chained traceback, exit 1.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from image_variants import (
    bomb_png,
    exif_rotated,
    grey_8bit,
    grey_16bit,
    physically_rotated,
    transparent_background,
)
from unirag.cli.main import main
from unirag.data.mbeir import write_candidates
from unirag.data.records import Candidate, Modality

#: (original, copy) file names in the variants folder: the copy must embed as the original does.
PAIRS = (("photo.jpg", "phone.jpg"), ("grey8.png", "grey16.png"), ("product.jpg", "cutout.png"))


@pytest.fixture(scope="module")
def variants(coco_mini: Path, myntra: Path, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("variants")
    photo = sorted((coco_mini / "images").glob("*.jpg"))[3]
    product = sorted((myntra / "images").glob("*.jpg"))[1]  # cut out on black: cosine 0.70 before
    shutil.copyfile(photo, root / "photo.jpg")
    shutil.copyfile(product, root / "product.jpg")
    exif_rotated(photo, root / "phone.jpg")
    physically_rotated(photo, root / "sideways.jpg")
    grey_8bit(photo, root / "grey8.png")
    grey_16bit(photo, root / "grey16.png")
    transparent_background(product, root / "cutout.png")
    bomb_png(root / "bomb.png")
    return root


@pytest.fixture(scope="module")
def built(variants: Path, tmp_path_factory) -> dict:
    """``unirag index build`` of a pool holding every variant and a bomb (offline encoder)."""
    out = tmp_path_factory.mktemp("hostile")
    names = sorted(p.name for p in variants.iterdir())
    write_candidates(out / "pool.jsonl", [Candidate(did=n, modality=Modality.IMAGE, img_path=n) for n in names])
    main(["index", "build", "--pool", str(out / "pool.jsonl"), "--images-root", str(variants),
          "--out", str(out / "index")])  # returns: exit status 0 (an error would exit 2 or raise)
    return {"index": out / "index", "names": names}


def test_bomb_is_skipped_and_listed_and_the_index_is_built(built, capsys) -> None:
    import unirag

    manifest = unirag.Index.open(built["index"]).manifest
    assert manifest["bad_images"]["count"] == 1
    assert manifest["bad_images"]["first"][0]["path"].endswith("bomb.png")
    assert "decompression bomb" in manifest["bad_images"]["first"][0]["reason"]
    assert manifest["total"] == len(built["names"]) - 1


@pytest.fixture(scope="module")
def retriever(built):
    import unirag

    return unirag.Retriever(built["index"]).warm_up()


def _scores(retriever, image) -> dict[str, float]:
    hits = retriever.search(image=image, k=20, modality="image")
    return {h.did: h.score for h in hits}


@pytest.mark.parametrize("original, copy", PAIRS)
def test_copies_embed_as_the_original_in_build_and_search(retriever, variants: Path, original, copy) -> None:
    """Index build (the copy's stored vector) and Retriever.search (the copy as the query, as a path,
    bytes and a PIL image) both give cosine >= 0.99 to the upright 8-bit original."""
    from PIL import Image

    assert _scores(retriever, variants / original)[copy] >= 0.99
    for query in (variants / copy, (variants / copy).read_bytes(), Image.open(variants / copy)):
        assert _scores(retriever, query)[original] >= 0.99


def test_the_tag_matters(retriever, variants: Path) -> None:
    """The untagged sideways copy stays far: the loader turns only what the EXIF tag says to turn."""
    scores = _scores(retriever, variants / "photo.jpg")
    assert scores["sideways.jpg"] < scores["phone.jpg"] - 0.01


def _faiss_full(monkeypatch) -> None:
    import faiss

    def write_index(index, path):
        Path(path).write_bytes(b"half")  # what the failed write left behind
        raise RuntimeError(f"Error in void faiss::write_index(const Index*, IOWriter*, int) at index_write.cpp:499: "
                           f"Error: 'ret == (size * 4)' failed: write error in {path}: 1 != 460800 "
                           "(No space left on device)")

    monkeypatch.setattr(faiss, "write_index", write_index)


def test_full_disk_mid_build_is_one_line_exit_2_and_the_old_index_stays(built, variants, tmp_path, monkeypatch,
                                                                         capsys) -> None:
    import unirag

    out = tmp_path / "index"
    shutil.copytree(built["index"], out)
    before = sorted(p.name for p in out.iterdir())
    capsys.readouterr()
    _faiss_full(monkeypatch)
    pool = built["index"].parent / "pool.jsonl"
    with pytest.raises(SystemExit) as code:
        main(["index", "build", "--pool", str(pool), "--images-root", str(variants), "--out", str(out)])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert code.value.code == 2
    assert len(err) == 1 and "Traceback" not in err[0]
    assert f"cannot write {out}" in err[0] and ".faiss: No space left on device (errno 28, ENOSPC)" in err[0]
    assert sorted(p.name for p in out.iterdir()) == before  # no partial data folder left
    assert unirag.Index.open(out).manifest["total"] == len(built["names"]) - 1


def test_full_disk_on_import_is_one_line_and_leaves_no_partial_file(coco_mini, tmp_path, monkeypatch, capsys) -> None:
    import unirag.runs.atomic as atomic

    def fsync(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # as a delayed-allocation flush reports it

    monkeypatch.setattr(atomic.os, "fsync", fsync)
    with pytest.raises(SystemExit) as code:
        main(["import", "coco", "--captions", str(coco_mini / "captions.jsonl"), "--images", str(coco_mini),
              "--out", str(tmp_path / "data"), "--check", "none"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code.value.code == 2 and len(err) == 1
    assert err[0].startswith(f"error: cannot write {tmp_path / 'data' / 'pool.jsonl'}: No space left on device "
                             "(errno 28, ENOSPC)")
    assert list((tmp_path / "data").iterdir()) == []  # no pool.jsonl, no .tmp file


def _can_mount_tmpfs() -> bool:
    return os.geteuid() == 0 and shutil.which("mount") is not None


@pytest.mark.skipif(not _can_mount_tmpfs(), reason="needs root to mount a 1 MB tmpfs")
def test_real_full_tmpfs(built, variants, tmp_path) -> None:
    """A real full file system (1 MB tmpfs, mostly filled), through the installed command."""
    import sys

    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)]).returncode != 0:
        pytest.skip("mount -t tmpfs refused here")
    try:
        (disk / "fill").write_bytes(b"\0" * 1016 * 1024)
        proc = subprocess.run([sys.executable, "-m", "unirag", "index", "build", "--pool",
                               str(built["index"].parent / "pool.jsonl"), "--images-root", str(variants),
                               "--out", str(disk / "index")], capture_output=True, text=True)
        errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert proc.returncode == 2 and len(errors) == 1 and "Traceback" not in proc.stderr
        assert "No space left on device (errno 28, ENOSPC)" in errors[0] and str(disk) in errors[0]
        assert sorted(p.name for p in disk.iterdir()) == ["fill"]  # nothing partial left
    finally:
        subprocess.run(["umount", str(disk)])
