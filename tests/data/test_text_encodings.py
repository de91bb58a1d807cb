"""Text files as people have them: latin-1 bytes, a UTF-8 BOM (Excel), a line cut short, a did twice.

Before: ``UnicodeDecodeError`` from data/jsonl.py (exit 1, no file or line), a BOM refused as
malformed JSON, a truncated line reported at "column 1", a duplicate did without a line number.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from unirag.cli.main import main
from unirag.data.importers.coco import read_coco
from unirag.data.importers.generic import import_generic
from unirag.data.jsonl import iter_json_lines
from unirag.data.mbeir import read_qrels, read_queries
from unirag.errors import InputError

LATIN1 = "a caf\u00e9 on the corner".encode("latin-1")  # 0xe9, not UTF-8


def _lines(path: Path, *lines: bytes, bom: bool = False) -> Path:
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + b"\n".join(lines) + b"\n")
    return path


def test_latin1_byte_names_file_line_and_offset(tmp_path: Path) -> None:
    good = b'{"qid": "q1", "query_modality": "text", "query_txt": "dog"}'
    bad = b'{"qid": "q2", "query_modality": "text", "query_txt": "' + LATIN1 + b'"}'
    path = _lines(tmp_path / "queries.jsonl", good, bad)
    with pytest.raises(InputError) as err:
        read_queries(path)
    e = err.value
    assert e.path == str(path) and e.line == 2
    col = bad.index(b"\xe9")
    assert f"byte 0xe9 at byte {col + 1} of the line, byte offset {len(good) + 1 + col} in the file" in str(e)
    assert "save the file as UTF-8" in str(e)


def test_latin1_in_csv_coco_and_qrels(rows_csv: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"captions\.csv:3: not valid UTF-8"):
        import_generic(rows_csv, tmp_path, tmp_path / "out", check="none", show_progress=False)
    coco = tmp_path / "coco.json"
    coco.write_bytes(b'{"images": [{"id": 1, "file_name": "a.jpg"}],\n "annotations": [{"id": 1, "image_id": 1, '
                     b'"caption": "' + LATIN1 + b'"}]}')
    with pytest.raises(InputError, match=r"coco\.json:2: not valid UTF-8: byte 0xe9"):
        read_coco(coco)
    qrels = _lines(tmp_path / "qrels.txt", b"q1 0 d1 1", b"q\xe9 0 d2 1")
    with pytest.raises(InputError, match=r"qrels\.txt:2: not valid UTF-8"):
        read_qrels(qrels)


@pytest.fixture
def rows_csv(tmp_path: Path) -> Path:
    return _lines(tmp_path / "captions.csv", b"image,caption", b"a.jpg,a dog", b"b.jpg," + LATIN1)


def test_cli_latin1_caption_file_is_one_line_exit_2(tmp_path: Path, rows_csv: Path, capsys) -> None:
    with pytest.raises(SystemExit) as out:
        main(["import", "csv", "--input", str(rows_csv), "--images", str(tmp_path), "--out", str(tmp_path / "o"),
              "--check", "none"])
    err = capsys.readouterr().err.strip()
    assert out.value.code == 2
    assert len(err.splitlines()) == 1 and "captions.csv:3: not valid UTF-8" in err and "Traceback" not in err


def test_utf8_bom_is_accepted_everywhere(tmp_path: Path) -> None:
    q = _lines(tmp_path / "q.jsonl", b'{"qid": "q1", "query_modality": "text", "query_txt": "caf\xc3\xa9"}', bom=True)
    assert read_queries(q)[0].txt == "caf\u00e9"
    csv_file = _lines(tmp_path / "c.csv", b"image,caption", b"a.jpg,a dog", bom=True)
    s = import_generic(csv_file, tmp_path, tmp_path / "out", check="none", show_progress=False)
    assert s.n_image_candidates == 1  # the header's first cell is "image", not "\ufeffimage"
    coco = tmp_path / "coco.json"
    coco.write_bytes(b"\xef\xbb\xbf" + json.dumps({"images": [{"id": 1, "file_name": "a.jpg"}],
                                                  "annotations": [{"id": 2, "image_id": 1, "caption": "x"}]}).encode())
    assert len(read_coco(coco)[0]) == 1
    assert read_qrels(_lines(tmp_path / "r.txt", b"q1 0 d1 1", bom=True)).get("q1")


def test_truncated_json_line_is_reported_at_its_end(tmp_path: Path) -> None:
    line = b'{"did": "a", "modality": "text", "txt": "a dog"'
    path = _lines(tmp_path / "pool.jsonl", line)
    with pytest.raises(InputError, match=rf"pool\.jsonl:1: malformed JSON \(.* at column {len(line) + 1}\)"):
        list(iter_json_lines(path))


def test_duplicate_did_names_both_lines(tmp_path: Path) -> None:
    from unirag import Index
    from unirag.encoders.registry import load_encoder

    pool = _lines(tmp_path / "pool.jsonl", b'{"did": "a", "modality": "text", "txt": "a dog"}',
                  b'{"did": "b", "modality": "text", "txt": "a cat"}',
                  b'{"did": "a", "modality": "text", "txt": "a bird"}')
    with pytest.raises(InputError) as err:
        Index.build(pool, tmp_path / "index", encoder=load_encoder(None), progress=False)
    assert err.value.line == 3 and "duplicate did 'a'" in str(err.value) and "(first at line 1)" in str(err.value)
