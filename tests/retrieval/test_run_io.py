"""Run files: JSONL + TREC written atomically, read back by read_retrieval_run; bad files named by line."""

from __future__ import annotations

from pathlib import Path

import pytest

from unirag.errors import InputError
from unirag.retrieval.results import Hit, Hits, Pair
from unirag.retrieval.run_io import read_retrieval_run, trec_path, write_retrieval_run


def _results() -> list[Hits]:
    return [
        Hits([Hit("I1", 0.91234567, "image", replaced="T1"), Hit("I2", 0.5, "image")],
             [Pair("I1", "T9", "a.jpg", "a dog", 0.91234567, "pairing")], "q1"),
        Hits([], [], "q2"),
    ]


def test_write_then_read_roundtrip(tmp_path: Path) -> None:
    run, trec = write_retrieval_run(tmp_path / "run.jsonl", _results())
    assert trec == tmp_path / "run.trec"
    back = read_retrieval_run(run)
    assert list(back) == ["q1", "q2"]
    q1 = back["q1"]
    assert q1.dids == ["I1", "I2"]
    assert q1[0].replaced == "T1" and q1[1].replaced is None
    assert q1[0].score == pytest.approx(0.912346)
    assert (q1.pairs[0].image_did, q1.pairs[0].text_did, q1.pairs[0].img_path, q1.pairs[0].txt,
            q1.pairs[0].via) == ("I1", "T9", "a.jpg", "a dog", "pairing")
    assert back["q2"] == [] and back["q2"].pairs == []


def test_trec_file_format(tmp_path: Path) -> None:
    _, trec = write_retrieval_run(tmp_path / "run.jsonl", _results())
    assert trec.read_text().splitlines() == ["q1 Q0 I1 1 0.912346 unirag", "q1 Q0 I2 2 0.500000 unirag"]
    assert trec_path(tmp_path / "run.out") == tmp_path / "run.out.trec"


def test_bad_run_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="run file not found"):
        read_retrieval_run(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"qid": "q1", "candidates": [], "pairs": []}\n{"qid": "q2", "candidates": [\n')
    with pytest.raises(InputError, match=r"bad.jsonl:2: malformed JSON"):
        read_retrieval_run(bad)
    bad.write_text('{"candidates": []}\n')
    with pytest.raises(InputError, match=r"bad.jsonl:1, field 'qid'"):
        read_retrieval_run(bad)
    bad.write_text('{"qid": "q1", "candidates": [{"score": 1, "modality": "text"}]}\n')
    with pytest.raises(InputError, match=r"bad.jsonl:1, field 'did'"):
        read_retrieval_run(bad)
    bad.write_text('{"qid": "q1"}\n{"qid": "q1"}\n')
    with pytest.raises(InputError, match=r"bad.jsonl:2, field 'qid': duplicate qid"):
        read_retrieval_run(bad)
