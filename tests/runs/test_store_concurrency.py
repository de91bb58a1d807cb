"""ResultStore shared by real processes: nothing lost, nothing stored twice, torn lines reported, live lines kept."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
import threading
import time

from unirag.runs.store import ResultStore

WRITER = textwrap.dedent("""
    import sys
    from unirag.runs.store import ResultStore
    path, start, stop, compact_at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    s = ResultStore(path, key="key")
    for i in range(start, stop):
        if not s.is_done(str(i)):
            s.append({"key": str(i), "status": "ok", "by": start})
        if i == compact_at:
            s.compact()
    s.close()
""")


def test_processes_appending_and_compacting_lose_and_duplicate_nothing(tmp_path):
    path = tmp_path / "calls.jsonl"
    # Four writers over overlapping key ranges; two of them compact (replace the file) mid-way.
    ranges = [(0, 300, 150), (100, 400, -1), (200, 500, 350), (0, 500, -1)]
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(a), str(b), str(c)])
             for a, b, c in ranges]
    for p in procs:
        assert p.wait(timeout=120) == 0
    keys = [json.loads(x)["key"] for x in path.read_text().splitlines()]
    assert sorted(keys, key=int) == [str(i) for i in range(500)]  # every key once: no loss, no duplicate
    with ResultStore(path, key="key") as s:
        assert not s.dropped_lines and len(s.done_keys()) == 500


def test_a_line_being_written_by_a_live_process_is_not_cut(tmp_path):
    """The writer holds the lock with half a line on disk; opening the store waits instead of truncating."""
    path = tmp_path / "out.jsonl"
    path.write_text('{"qid": "a", "status": "ok"}\n')
    go = tmp_path / "go"
    code = textwrap.dedent(f"""
        import fcntl, os, time
        lock = open({str(path)!r} + ".lock", "a")
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        with open({str(path)!r}, "ab") as f:
            f.write(b'{{"qid": "b", "sta'); f.flush()
            print("half", flush=True)
            while not os.path.exists({str(go)!r}):
                time.sleep(0.01)
            f.write(b'tus": "ok"}}\\n'); f.flush()
        fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    """)
    writer = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert writer.stdout.readline().strip() == "half"
    opened: dict = {}
    t = threading.Thread(target=lambda: opened.setdefault("store", ResultStore(path)))
    t.start()
    time.sleep(0.3)
    assert "store" not in opened  # blocked on the writer's lock, not reading half a line
    go.write_text("1")
    t.join(timeout=30)
    assert writer.wait(timeout=30) == 0
    s = opened["store"]
    assert s.done_keys() == {"a", "b"} and not s.dropped_lines
    s.close()
    assert [json.loads(x)["qid"] for x in path.read_text().splitlines()] == ["a", "b"]


def test_torn_lines_are_counted_with_line_numbers_and_logged(tmp_path, caplog):
    path = tmp_path / "out.jsonl"
    path.write_text('{"qid": "a", "status": "ok"}\n{"qid": "b", "sta\n{"qid": "c", "status": "ok"}\n'
                    '{"qid": "d"\n{"qid": "e", "status": "ok"}\n{"qid": "f", "st')
    with caplog.at_level(logging.WARNING, logger="unirag.runs.store"), ResultStore(path) as s:
        assert s.dropped_lines == [2, 4, 6]
        assert s.done_keys() == {"a", "c", "e"}
    assert "dropped 3 unreadable line(s)" in caplog.text and "2, 4, 6" in caplog.text
    assert path.read_text().endswith('"e", "status": "ok"}\n')  # only the crashed writer's tail is cut


def test_a_failure_elsewhere_never_hides_a_finished_record(tmp_path):
    path = tmp_path / "out.jsonl"
    with ResultStore(path) as a, ResultStore(path) as b:
        a.append({"qid": "x", "status": "ok", "caption": "done"})
        stood = b.append({"qid": "x", "status": "error", "error": "timeout"})  # b had not seen a's line
        assert stood["caption"] == "done" and len(path.read_text().splitlines()) == 1  # b's not written
        assert b.append({"qid": "x", "status": "ok", "caption": "redo"}, replace=True)["caption"] == "redo"
    with ResultStore(path) as s:
        assert s.get("x")["caption"] == "redo"
    assert len(path.read_text().splitlines()) == 2


def test_a_claim_holds_while_its_owner_lives_and_is_taken_over_when_it_dies(tmp_path):
    path = tmp_path / "calls.jsonl"
    code = textwrap.dedent(f"""
        import sys, time
        from unirag.runs.store import ResultStore
        s = ResultStore({str(path)!r}, key="key")
        assert s.claim("k1") and s.claim("k2")
        s.append({{"key": "k2", "status": "ok"}})  # k2 finished: its claim is released
        print("claimed", flush=True)
        time.sleep(60)
    """)
    owner = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout.readline().strip() == "claimed"
        with ResultStore(path, key="key") as s:
            assert not s.claim("k1")       # a live process is working on it
            assert not s.claim("k2")       # done
            assert s.claim("k3")
            owner.kill()
            owner.wait(timeout=30)
            assert s.claim("k1")           # its owner died (the kernel dropped its lock): taken over
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()


def test_a_process_waits_for_a_claimed_item_instead_of_calling_again(tmp_path):
    from unirag.runs.executor import run_items

    path = tmp_path / "calls.jsonl"
    with ResultStore(path, key="key") as other:
        assert other.claim("b")  # "another process" (its own flock) is working on b
        calls = []

        def finish_b_later():
            time.sleep(0.3)
            other.append({"key": "b", "status": "ok", "out": "by the other"})

        t = threading.Thread(target=finish_b_later)
        t.start()
        with ResultStore(path, key="key") as mine:
            counts = run_items(["a", "b", "c"], key=str, work=lambda its: [calls.append(its[0]) or {"out": its[0]}],
                               store=mine, progress=False)
            assert mine.get("b")["out"] == "by the other"
        t.join()
    assert calls == ["a", "c"] and counts == {"ok": 2, "error": 0, "skipped": 1}


def test_a_compaction_elsewhere_is_noticed_even_when_the_new_file_reuses_the_inode(tmp_path):
    """Readers follow a replaced file by the compaction counter in the lock file, not only by inode number."""
    path = tmp_path / "out.jsonl"
    with ResultStore(path) as reader, ResultStore(path) as writer:
        writer.append({"qid": "a", "status": "ok", "v": 1})
        reader.refresh()
        writer.append({"qid": "b", "status": "ok"})
        writer.compact(["b", "a"])  # rewritten: "b" now comes first, the byte offsets changed
        reader._ino = path.stat().st_ino  # as if the new file had got the old inode number
        writer.append({"qid": "c", "status": "ok"})
        reader.refresh()
        assert reader.done_keys() == {"a", "b", "c"} and not reader.dropped_lines
