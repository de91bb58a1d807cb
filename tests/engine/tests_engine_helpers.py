"""Command lines and waiting helpers shared by the engine tests."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

UNIRAG = [sys.executable, "-m", "unirag"]


def caption_cmd(data: dict, out: Path, generator: str) -> list[str]:
    return UNIRAG + ["caption", "--queries", str(data["queries"]), "--images-root", str(data["images_root"]),
                     "--generator", generator, "--mode", "rag", "--k", "2", "--retrieval", str(data["run"]),
                     "--out", str(out), "--no-progress"]


def wait_for_records(path: Path, n: int, proc: subprocess.Popen, timeout: float = 240) -> int:
    """Wait until ``path`` holds at least ``n`` complete lines (the process must still be running)."""
    deadline = time.time() + timeout
    while True:
        lines = path.read_bytes().count(b"\n") if path.exists() else 0
        if lines >= n:
            return lines
        if proc.poll() is not None:
            raise AssertionError(f"the run ended before it could be killed: {proc.stderr.read()[-2000:]!r}")
        if time.time() > deadline:
            raise AssertionError(f"fewer than {n} records after {timeout}s")
        time.sleep(0.02)

def read_records(run_dir: Path, fields=("qid", "caption", "status", "examples")) -> list[dict]:
    """The run's outputs.jsonl records, only the fields that must not depend on the engine."""
    recs = [json.loads(x) for x in (run_dir / "outputs.jsonl").read_text().splitlines() if x.strip()]
    return [{k: r.get(k) for k in fields} for r in recs]
