"""A rebuild that loses a modality, or more than 10% of one, does not replace the index (issue 29, point 7).

Before: rebuilding after the image folder vanished replaced a 40-candidate index with a text-only
20-candidate one and exited 0 with a warning. Now it exits 2 with one line and the old index stays,
unless ``--allow-shrink``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from PIL import Image

from cli_capture import main_result
from index.helpers import HashEncoder
from unirag import Index
from unirag.data.mbeir import write_candidates
from unirag.data.records import Candidate, Modality
from unirag.errors import ConfigError


@pytest.fixture(autouse=True)
def hash_encoder(monkeypatch):
    """``--encoder hash`` (and the default encoder) resolve to the fast test encoder."""
    import unirag.encoders.registry as registry

    monkeypatch.setattr(registry, "load_encoder", lambda spec=None, **kwargs: HashEncoder())


def _pool(tmp_path: Path, n_images: int = 20, n_texts: int = 20) -> Path:
    images = tmp_path / "images"
    images.mkdir(exist_ok=True)
    pool = []
    for i in range(n_images):
        Image.new("RGB", (8, 8), (12 * i, 255 - 12 * i, 7 * i)).save(images / f"{i}.png")
        pool.append(Candidate(did=f"img{i}", modality=Modality.IMAGE, img_path=f"{i}.png"))
    pool += [Candidate(did=f"txt{i}", modality=Modality.TEXT, txt=f"a photo number {i}") for i in range(n_texts)]
    write_candidates(tmp_path / "pool.jsonl", pool)
    return tmp_path / "pool.jsonl"


def _counts(index_dir: Path) -> dict[str, int]:
    return json.loads((index_dir / "manifest.json").read_text())["counts"]


def _build_args(tmp_path: Path, *extra: str) -> list[str]:
    return ["index", "build", "--pool", str(tmp_path / "pool.jsonl"), "--images-root", str(tmp_path / "images"),
            "--out", str(tmp_path / "index"), "--encoder", "hash", *extra]


def test_rebuild_after_the_image_folder_vanished_keeps_the_old_index(tmp_path, capsys):
    _pool(tmp_path)
    code, _, err = main_result(_build_args(tmp_path), capsys)
    assert code == 0, err
    assert _counts(tmp_path / "index") == {"image": 20, "text": 20}
    before = (tmp_path / "index" / "manifest.json").read_bytes()
    shutil.rmtree(tmp_path / "images")

    code, _, err = main_result(_build_args(tmp_path), capsys)
    assert code == 2 and "Traceback" not in err
    line = next(x for x in err.splitlines() if "error:" in x)
    assert "loses all 20 image candidates" in line and "--allow-shrink" in line and "old index is kept" in line
    assert "20 image(s) were missing or unreadable" in line
    assert (tmp_path / "index" / "manifest.json").read_bytes() == before  # the old index still stands
    assert len(list((tmp_path / "index").glob("data-*"))) == 1  # and the refused build left no folder

    code, _, err = main_result(_build_args(tmp_path, "--allow-shrink"), capsys)
    assert code == 0, err
    assert _counts(tmp_path / "index") == {"text": 20}


def test_a_pool_shrinking_past_the_setting_is_refused_and_under_it_is_not(tmp_path):
    """index_max_shrink (10%): 20 -> 17 texts (15% fewer) is refused; 20 -> 19 (5%) replaces the index."""
    _pool(tmp_path, n_images=0, n_texts=20)
    Index.build(tmp_path / "pool.jsonl", tmp_path / "index", encoder=HashEncoder(), progress=False)
    _pool(tmp_path, n_images=0, n_texts=17)
    with pytest.raises(ConfigError, match="loses 3 of 20 text candidates"):
        Index.build(tmp_path / "pool.jsonl", tmp_path / "index", encoder=HashEncoder(), progress=False)
    assert _counts(tmp_path / "index") == {"text": 20}
    _pool(tmp_path, n_images=0, n_texts=19)
    Index.build(tmp_path / "pool.jsonl", tmp_path / "index", encoder=HashEncoder(), progress=False)
    assert _counts(tmp_path / "index") == {"text": 19}
    _pool(tmp_path, n_images=0, n_texts=5)  # the Python API's way past the guard
    Index.build(tmp_path / "pool.jsonl", tmp_path / "index", encoder=HashEncoder(), progress=False,
                allow_shrink=True)
    assert _counts(tmp_path / "index") == {"text": 5}
