"""M-BEIR reader/writer on real UniIR lines, qrels, and every bad-input path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from unirag.data.mbeir import (
    load_pool,
    read_candidates,
    read_qrels,
    read_queries,
    write_candidates,
    write_qrels,
    write_queries,
)
from unirag.data.records import Modality
from unirag.errors import InputError

EXAMPLES = ("unirag_sample_retrieval_image_to_text.jsonl", "unirag_sample_retrieval_text_to_image.jsonl")


@pytest.fixture(scope="module")
def real_lines(mbeir_examples: Path) -> list[dict]:
    lines = []
    for name in EXAMPLES:
        path = mbeir_examples / "real_examples" / name
        lines += [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    assert len(lines) == 4
    return lines


def _write_jsonl(path: Path, objs) -> Path:
    path.write_text("".join(json.dumps(o) + "\n" for o in objs), encoding="utf-8")
    return path


def test_real_queries_round_trip(tmp_path: Path, real_lines: list[dict]) -> None:
    src = _write_jsonl(tmp_path / "q.jsonl", [r["query"] for r in real_lines])
    queries = read_queries(src)
    assert [q.qid for q in queries] == [r["query"]["qid"] for r in real_lines]
    i2t = queries[0]
    assert i2t.modality is Modality.IMAGE and i2t.task_id == 3 and i2t.txt is None
    assert i2t.pos_cand_list == ["9:2", "9:3", "9:4", "9:5", "9:6"]
    out = tmp_path / "q2.jsonl"
    write_queries(out, queries)
    back = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert back == [r["query"] for r in real_lines]  # field for field, nulls included


def test_real_candidates_round_trip(tmp_path: Path, real_lines: list[dict]) -> None:
    cands = [c for r in real_lines for c in r["candidates"]]
    assert len(cands) == 40
    src = _write_jsonl(tmp_path / "pool.jsonl", cands)
    read = list(read_candidates(src))
    assert {c.modality for c in read} == {Modality.TEXT, Modality.IMAGE}
    out = tmp_path / "pool2.jsonl"
    write_candidates(out, read)
    back = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    # Some real lines omit src_content; the writer always writes the field (null), nothing else changes.
    assert back == [{**c, "src_content": c.get("src_content")} for c in cands]
    pool = load_pool(out)
    assert pool["9:2"].txt == "A man with a red helmet on a small moped on a dirt road."


def test_source_id_survives_round_trip(tmp_path: Path) -> None:
    src = _write_jsonl(
        tmp_path / "p.jsonl",
        [
            {
                "did": "a",
                "txt": None,
                "img_path": "x.jpg",
                "modality": "image",
                "src_content": '{"source_id": "7"}',
            },
            {
                "did": "b",
                "txt": "a dog",
                "img_path": None,
                "modality": "text",
                "src_content": {"source_id": 7},
            },
        ],
    )
    cands = list(read_candidates(src))
    assert [c.source_id for c in cands] == ["7", "7"]
    write_candidates(tmp_path / "p2.jsonl", cands)
    assert [c.source_id for c in read_candidates(tmp_path / "p2.jsonl")] == ["7", "7"]


def test_qrels_read_and_write(tmp_path: Path, real_lines: list[dict]) -> None:
    queries = read_queries(_write_jsonl(tmp_path / "q.jsonl", [r["query"] for r in real_lines]))
    write_qrels(tmp_path / "qrels.txt", queries)
    lines = (tmp_path / "qrels.txt").read_text().splitlines()
    assert lines[0] == "9:6 0 9:2 1 3"
    qrels = read_qrels(tmp_path / "qrels.txt")
    assert qrels.get("9:6") == {"9:2", "9:3", "9:4", "9:5", "9:6"}
    assert qrels.task_ids["9:6"] == 3
    assert len(qrels) == 4
    (tmp_path / "q4.txt").write_text("q1 0 d1 1\nq1 0 d2 0\n\nq2 0 d3 2\n")
    four = read_qrels(tmp_path / "q4.txt")
    assert four.get("q1") == {"d1"} and four.get("q2") == {"d3"} and four.task_ids == {}


@pytest.mark.parametrize(
    "content, line, field, words",
    [
        (
            '{"qid": "1", "query_modality": "text", "query_txt": "a"}\n{"qid": "2", oops}\n',
            2,
            None,
            "malformed JSON",
        ),
        ('{"query_modality": "text", "query_txt": "a"}\n', 1, "qid", "missing required field"),
        (
            '{"qid": "1", "query_modality": "audio", "query_txt": "a"}\n',
            1,
            "query_modality",
            "unknown modality",
        ),
        ('{"qid": "1", "query_modality": "text", "query_txt": null}\n', 1, "query_txt", "needs a text"),
        ('{"qid": "1", "query_modality": "image"}\n', 1, "query_img_path", "needs an image path"),
        (
            '{"qid": "1", "query_modality": "text", "query_txt": "a"}\n\n'
            '{"qid": "1", "query_modality": "text", "query_txt": "b"}\n',
            3,
            "qid",
            "duplicate qid",
        ),
        (
            '{"qid": "1", "query_modality": "text", "query_txt": "a", "task_id": "3"}\n',
            1,
            "task_id",
            "integer",
        ),
        (
            '{"qid": "1", "query_modality": "text", "query_txt": "a", "pos_cand_list": "d1"}\n',
            1,
            "pos_cand_list",
            "list",
        ),
        ('["qid", "1"]\n', 1, None, "JSON object"),
    ],
)
def test_bad_queries_name_file_line_field(tmp_path: Path, content: str, line: int, field, words: str) -> None:
    path = tmp_path / "queries.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(InputError) as err:
        read_queries(path)
    assert err.value.line == line and err.value.field == field
    assert f"{path}:{line}" in str(err.value) and words in str(err.value)


@pytest.mark.parametrize(
    "obj, field, words",
    [
        ({"txt": "a", "modality": "text"}, "did", "missing required field"),
        ({"did": "d", "txt": "a", "modality": "video"}, "modality", "unknown modality"),
        ({"did": "d", "txt": None, "modality": "text"}, "txt", "needs a text"),
        ({"did": "d", "txt": "", "modality": "image,text", "img_path": "x.jpg"}, "txt", "needs a text"),
        ({"did": "d", "txt": 5, "modality": "text"}, "txt", "expected a string"),
    ],
)
def test_bad_candidates_name_file_line_field(tmp_path: Path, obj: dict, field: str, words: str) -> None:
    good = {"did": "ok", "txt": "fine", "img_path": None, "modality": "text", "src_content": None}
    path = _write_jsonl(tmp_path / "pool.jsonl", [good, obj])
    it = read_candidates(path)
    assert next(it).did == "ok"  # streaming: the good first line is yielded before the bad one is read
    with pytest.raises(InputError) as err:
        next(it)
    assert err.value.line == 2 and err.value.field == field and words in str(err.value)


def test_modality_accepts_either_order() -> None:
    assert Modality.parse("text,image") is Modality.IMAGE_TEXT
    assert Modality.parse(" image ") is Modality.IMAGE


def test_bad_qrels_and_missing_files(tmp_path: Path) -> None:
    (tmp_path / "q.txt").write_text("q1 0 d1 1 3\nq2 d2\n")
    with pytest.raises(InputError, match=r"q\.txt:2"):
        read_qrels(tmp_path / "q.txt")
    (tmp_path / "q2.txt").write_text("q1 0 d1 yes\n")
    with pytest.raises(InputError, match="integers"):
        read_qrels(tmp_path / "q2.txt")
    for reader in (read_qrels, read_queries, lambda p: list(read_candidates(p))):
        with pytest.raises(InputError, match="file not found"):
            reader(tmp_path / "absent.jsonl")
