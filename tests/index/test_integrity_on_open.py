"""A ``.faiss`` file damaged in place (same size) is refused, not served (issue 29, point 5).

Before: a flipped float became ``inf``; the size check on open passed, rankings changed and the run
file held ``"score": Infinity`` (not JSON). Now open checks a sample of each shard's rows (every row of
a small shard) and every search checks the scores it returns; both errors point to
``unirag index verify``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cli_capture import main_result
from index.helpers import HashEncoder, text_vector
from unirag import Index
from unirag.data.mbeir import write_candidates, write_queries
from unirag.data.records import Candidate, Modality, Query
from unirag.errors import InputError
from unirag.index.store import OPEN_SAMPLE_ROWS, sample_rows
from unirag.retrieval.retriever import Retriever

QUERY = "a dog on a red bench"


@pytest.fixture(autouse=True)
def hash_encoder(monkeypatch):
    """``--encoder hash`` resolves to the test encoder the index was built with."""
    import unirag.encoders.registry as registry

    monkeypatch.setattr(registry, "load_encoder", lambda spec=None, **kwargs: HashEncoder())


def _build(tmp_path: Path, n: int) -> Path:
    pool = [Candidate(did=f"t{i}", modality=Modality.TEXT, txt=f"caption number {i} of a cat {i % 7}")
            for i in range(n)]
    write_candidates(tmp_path / "pool.jsonl", pool)
    write_queries(tmp_path / "queries.jsonl", [Query(qid="q0", modality=Modality.TEXT, txt=QUERY)])
    out = tmp_path / "index"
    Index.build(tmp_path / "pool.jsonl", out, encoder=HashEncoder(), progress=False)
    return out


def _poison(index_dir: Path, row: int, value: float) -> None:
    """Overwrite one float of stored vector ``row`` in place (the file keeps its size): the component
    where the query's vector is largest, so that an ``inf`` there scores ``+inf`` and ranks first."""
    vector = Index.open(index_dir).subs[Modality.TEXT].reconstruct(row)
    column = int(np.argmax(text_vector(QUERY)))
    data_dir = index_dir / json.loads((index_dir / "manifest.json").read_text())["data"]
    shard = next(data_dir.glob("text.*.faiss"))
    data = bytearray(shard.read_bytes())
    at = data.find(vector.astype(np.float32).tobytes())
    assert at > 0, "the row's bytes are found in the file"
    size = len(data)
    data[at + 4 * column: at + 4 * column + 4] = np.float32(value).tobytes()
    shard.write_bytes(bytes(data))
    assert shard.stat().st_size == size


def _retrieve(tmp_path: Path, index_dir: Path, capsys) -> tuple[int, str]:
    code, _, err = main_result(["retrieve", "--index", str(index_dir), "--queries", str(tmp_path / "queries.jsonl"),
                                "--encoder", "hash", "--k", "3", "--out", str(tmp_path / "run.jsonl")], capsys)
    return code, err


@pytest.mark.parametrize("value", [np.inf, np.nan])
def test_a_damaged_row_of_a_small_index_is_refused_on_open(tmp_path, capsys, value):
    index_dir = _build(tmp_path, 20)
    _poison(index_dir, 7, value)
    with pytest.raises(InputError, match="unirag index verify"):
        Index.open(index_dir)
    code, err = _retrieve(tmp_path, index_dir, capsys)
    assert code == 2 and "index verify" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run.jsonl").exists()
    code, _, err = main_result(["index", "verify", str(index_dir)], capsys)  # and verify names the file
    assert code == 2 and "checksum mismatch" in err and "text.00000.faiss" in err


def test_a_damaged_row_outside_the_open_sample_is_refused_when_served(tmp_path, capsys):
    n = 2 * OPEN_SAMPLE_ROWS + 10
    row = next(r for r in range(1, n) if r not in set(sample_rows(n).tolist()))
    index_dir = _build(tmp_path, n)
    _poison(index_dir, row, np.inf)
    opened = Index.open(index_dir)  # open stays cheap: this row is not read
    with pytest.raises(InputError, match=f"candidate 't{row}' scored inf.*unirag index verify"):
        Retriever(opened, HashEncoder()).search(text=QUERY, k=3)
    code, err = _retrieve(tmp_path, index_dir, capsys)
    assert code == 2 and f"'t{row}' scored inf" in err and "index verify" in err and "Traceback" not in err
    assert not (tmp_path / "run.jsonl").exists()


def test_a_run_file_never_holds_infinity(tmp_path):
    """The JSON writer of retrieval runs refuses a non-finite score (allow_nan=False) and leaves no file."""
    from unirag.errors import UniragError
    from unirag.retrieval.results import Hit, Hits
    from unirag.retrieval.run_io import write_retrieval_run

    good = Hits(qid="q0", hits=[Hit(did="a", score=0.5, modality="text")])
    bad = Hits(qid="q1", hits=[Hit(did="b", score=float("inf"), modality="text")])
    with pytest.raises(UniragError, match="'q1' has a non-finite score.*unirag index verify"):
        write_retrieval_run(tmp_path / "run.jsonl", [good, bad])
    assert list(tmp_path.iterdir()) == []
