"""ResultStore: crash-safe append, resume, latest-wins, compaction."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from unirag.errors import UniragError
from unirag.runs.store import ResultStore, RunLock


def test_append_and_reopen_keeps_records(tmp_path):
    path = tmp_path / "out.jsonl"
    with ResultStore(path) as s:
        s.append({"qid": "a", "status": "ok", "caption": "x"})
        s.append({"qid": "b", "status": "error", "error": "boom"})
    with ResultStore(path) as s:
        assert s.done_keys() == {"a"}  # the failure is retried, not counted as done
        assert s.get("b")["error"] == "boom"
        assert len(s) == 2


def test_latest_record_wins_and_compact_dedups(tmp_path):
    path = tmp_path / "out.jsonl"
    with ResultStore(path) as s:
        s.append({"qid": "a", "status": "error", "error": "429"})
        s.append({"qid": "b", "status": "ok"})
        s.append({"qid": "a", "status": "ok", "caption": "second try"})
        assert s.compact(order=["b", "a"]) == 2
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [r["qid"] for r in lines] == ["b", "a"]
    assert lines[1]["caption"] == "second try"


def test_compacting_a_compact_file_leaves_it_alone(tmp_path):
    """A resumed run with nothing left to do must not rewrite its records: ``make demo`` rescores a
    caption run only when outputs.jsonl is newer than its metrics.json."""
    path = tmp_path / "out.jsonl"
    with ResultStore(path) as s:
        s.append({"qid": "a", "status": "ok"})
        s.append({"qid": "b", "status": "ok"})
    before = path.stat()
    with ResultStore(path) as s:
        assert s.compact(order=["a", "b"]) == 2
    assert (path.stat().st_ino, path.stat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    with ResultStore(path) as s:  # another order is a real change
        assert s.compact(order=["b", "a"]) == 2
    assert path.stat().st_ino != before.st_ino
    assert [json.loads(x)["qid"] for x in path.read_text().splitlines()] == ["b", "a"]


def test_torn_last_line_is_dropped_and_truncated(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_text('{"qid": "a", "status": "ok"}\n{"qid": "b", "sta')
    with ResultStore(path) as s:
        assert s.dropped_lines
        assert s.done_keys() == {"a"}
        s.append({"qid": "c", "status": "ok"})
    # The torn bytes are gone and the new line starts on a fresh line.
    lines = path.read_text().splitlines()
    assert [json.loads(x)["qid"] for x in lines] == ["a", "c"]


def test_record_without_key_is_rejected(tmp_path):
    with ResultStore(tmp_path / "o.jsonl") as s, pytest.raises(ValueError, match="qid"):
        s.append({"status": "ok"})


def test_killed_writer_loses_nothing_finished(tmp_path):
    """A process killed mid-run leaves every line it finished readable."""
    path = tmp_path / "out.jsonl"
    code = textwrap.dedent(f"""
        import os, signal
        from unirag.runs.store import ResultStore
        s = ResultStore({str(path)!r})
        for i in range(50):
            s.append({{"qid": str(i), "status": "ok"}})
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", code])
    assert proc.returncode != 0
    with ResultStore(path) as s:
        assert s.done_keys() == {str(i) for i in range(50)}


def test_run_lock_refuses_second_writer(tmp_path):
    with RunLock(tmp_path):
        with pytest.raises(UniragError, match="another unirag process"):
            with RunLock(tmp_path):
                pass
    with RunLock(tmp_path):  # released after the first one exits
        pass


def test_atomic_write_keeps_old_file_when_writer_fails(tmp_path):
    from unirag.runs.atomic import atomic_write_lines

    path = tmp_path / "pool.jsonl"
    atomic_write_lines(path, ["old"])

    def broken():
        yield "new line"
        raise RuntimeError("crash mid-write")

    with pytest.raises(RuntimeError):
        atomic_write_lines(path, broken())
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["pool.jsonl"]  # no temp file left behind
