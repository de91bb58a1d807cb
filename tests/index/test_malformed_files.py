"""Malformed index and pool files end in one line and exit status 2, not a traceback (issue 29, point 6).

Before: non-UTF-8 bytes in an index's ``manifest.json`` raised ``UnicodeDecodeError`` from ``index
info``, ``index verify`` and ``retrieve``; a pool line nested 100,000 levels deep raised
``RecursionError`` from ``index build``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_capture import main_result
from index.helpers import HashEncoder
from unirag import Index
from unirag.data.mbeir import write_candidates, write_queries
from unirag.data.records import Candidate, Modality, Query

DEEP = "[" * 100_000 + "]" * 100_000


@pytest.fixture(autouse=True)
def hash_encoder(monkeypatch):
    import unirag.encoders.registry as registry

    monkeypatch.setattr(registry, "load_encoder", lambda spec=None, **kwargs: HashEncoder())


@pytest.fixture
def index_dir(tmp_path) -> Path:
    write_candidates(tmp_path / "pool.jsonl", [Candidate(did=f"t{i}", modality=Modality.TEXT, txt=f"a cat {i}")
                                               for i in range(5)])
    write_queries(tmp_path / "queries.jsonl", [Query(qid="q0", modality=Modality.TEXT, txt="a cat")])
    Index.build(tmp_path / "pool.jsonl", tmp_path / "index", encoder=HashEncoder(), progress=False)
    return tmp_path / "index"


def _commands(index_dir: Path) -> list[list[str]]:
    queries = index_dir.parent / "queries.jsonl"
    return [["index", "info", str(index_dir)], ["index", "verify", str(index_dir)],
            ["retrieve", "--index", str(index_dir), "--queries", str(queries), "--encoder", "hash",
             "--out", str(index_dir.parent / "run.jsonl")]]


def _one_line_exit_2(args: list[str], capsys) -> str:
    code, _, err = main_result(args, capsys)
    assert code == 2, (args, err)
    assert "Traceback" not in err and err.count("error: ") == 1, err  # (a progress bar may share stderr)
    return err


def test_non_utf8_bytes_in_the_index_manifest(index_dir, capsys):
    manifest = index_dir / "manifest.json"
    manifest.write_bytes(manifest.read_bytes().replace(b'"test-hash"', b'"test-\xff\xfehash"', 1))
    for args in _commands(index_dir):
        err = _one_line_exit_2(args, capsys)
        assert "manifest.json" in err and "not valid UTF-8: byte 0xff" in err


@pytest.mark.parametrize("damage", ["deep", "types", "files"])
def test_a_manifest_nested_too_deep_or_with_wrong_types(index_dir, capsys, damage):
    manifest = index_dir / "manifest.json"
    data = json.loads(manifest.read_text())
    if damage == "deep":
        data["encoder"]["config"] = "@@"
        text = json.dumps(data).replace('"@@"', DEEP)
    elif damage == "types":
        text = json.dumps({**data, "subindexes": ["text"]})
    else:
        name = next(iter(data["files"]))
        text = json.dumps({**data, "files": {**data["files"], name: {"size": "12"}}})
    manifest.write_text(text)
    for args in _commands(index_dir):
        err = _one_line_exit_2(args, capsys)
        assert "manifest.json" in err
        assert {"deep": "nested too deeply", "types": "field 'subindexes'", "files": "field 'files."}[damage] in err


def test_a_pool_or_query_line_nested_100000_levels(index_dir, tmp_path, capsys):
    pool = tmp_path / "deep_pool.jsonl"
    pool.write_text('{"did": "a", "txt": "x", "img_path": null, "modality": "text"}\n'
                    f'{{"did": "b", "txt": {DEEP}, "modality": "text"}}\n')
    err = _one_line_exit_2(["index", "build", "--pool", str(pool), "--out", str(tmp_path / "i2")], capsys)
    assert "deep_pool.jsonl:2" in err and "nested too deeply" in err
    queries = tmp_path / "deep_queries.jsonl"
    queries.write_text(DEEP + "\n")
    err = _one_line_exit_2(["retrieve", "--index", str(index_dir), "--queries", str(queries), "--encoder", "hash",
                            "--out", str(tmp_path / "run.jsonl")], capsys)
    assert "deep_queries.jsonl:1" in err and "nested too deeply" in err


def test_run_folder_files_nested_too_deep(tmp_path):
    """The readers of a caption/image run folder (outputs, manifest, per-query scores) say so too."""
    from unirag.errors import InputError
    from unirag.runs.rundir import read_per_query, read_run_dir

    run = tmp_path / "run"
    run.mkdir()
    (run / "outputs.jsonl").write_text('{"qid": "q0", "status": "ok"}\n' + DEEP + "\n")
    with pytest.raises(InputError, match=r"outputs\.jsonl:2: JSON nested too deeply"):
        read_run_dir(run)
    (run / "outputs.jsonl").write_text('{"qid": "q0", "status": "ok"}\n')
    (run / "manifest.json").write_bytes(b'{"task": "caption\xff"}')
    with pytest.raises(InputError, match=r"manifest\.json:1: not valid UTF-8"):
        read_run_dir(run)
    (run / "metrics_per_query.jsonl").write_text(DEEP + "\n")
    with pytest.raises(InputError, match=r"metrics_per_query\.jsonl:1: JSON nested too deeply"):
        read_per_query(run)


def test_a_metadata_page_damaged_in_place(tmp_path):
    """meta.sqlite damaged past its header opens, and fails on the first read of a damaged page with
    one error pointing to ``unirag index verify`` (not sqlite3.DatabaseError)."""
    from unirag.errors import InputError

    write_candidates(tmp_path / "pool.jsonl", [Candidate(did=f"t{i}", modality=Modality.TEXT, txt=f"a cat {i} " * 30)
                                               for i in range(300)])
    Index.build(tmp_path / "pool.jsonl", tmp_path / "index", encoder=HashEncoder(), progress=False)
    meta = next((tmp_path / "index").glob("data-*/meta.sqlite"))
    data = bytearray(meta.read_bytes())
    data[8192:8192 + 2048] = b"\x5a" * 2048  # one page's cells: the header and the schema stay readable
    meta.write_bytes(bytes(data))
    index = Index.open(tmp_path / "index")
    with pytest.raises(InputError, match=r"meta\.sqlite: cannot read the metadata file .*unirag index verify"):
        [index.metas[g] for g in range(300)]
