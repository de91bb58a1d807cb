"""Shared plumbing of the API throughput benchmarks (captioning and image generation).

Both benchmarks drive the real pipeline against the local fake server from ``tests/`` with the same
load knobs (queries, latency, failure rate, concurrency, seed, COCO folder) and judge a run the same
way (every query ``ok``, none lost, none duplicated), so those parts live here once.

The benchmarks are scripts run as ``python benchmarks/<name>.py``: Python puts ``benchmarks/`` on
``sys.path`` then, which is what makes ``import _harness`` work; importing this module in turn puts
``tests/`` on the path for ``fake_openai_server``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_COCO = REPO.parent / "shared" / "data" / "coco-val2017-mini"
if str(REPO / "tests") not in sys.path:
    sys.path.insert(0, str(REPO / "tests"))


def add_load_args(ap: argparse.ArgumentParser, queries: int) -> None:
    """The load options every API throughput benchmark takes (``queries`` = default query count)."""
    ap.add_argument("--queries", type=int, default=queries)
    ap.add_argument("--latency", type=float, default=0.2)
    ap.add_argument("--failure-rate", type=float, default=0.10)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--coco", type=Path, default=DEFAULT_COCO)


def coco_rows(coco: Path) -> list[dict]:
    """The lines of the COCO mini set's ``captions.jsonl`` (image, image_id, captions)."""
    return [json.loads(x) for x in (coco / "captions.jsonl").read_text().splitlines() if x.strip()]


def read_outputs(run_dir: Path) -> list[dict]:
    """Every line of a run's ``outputs.jsonl`` (after compaction: one per query)."""
    return [json.loads(x) for x in (run_dir / "outputs.jsonl").read_text().splitlines()]


def completeness(lines: list[dict], n_queries: int) -> dict[str, int]:
    """What the benchmarks check: lines written, how many ``ok``, duplicated and lost queries."""
    qids = [r["qid"] for r in lines]
    return {"lines": len(lines), "ok": sum(r["status"] == "ok" for r in lines),
            "duplicated": len(qids) - len(set(qids)), "lost": n_queries - len(set(qids))}


def pin_threads_from_argv(default: int = 1) -> int:
    """Set the BLAS/OpenMP thread counts from ``--threads N`` (default ``default``); call it before
    numpy or faiss is imported, since they read these variables once, when they load."""
    import os

    threads = default
    for i, arg in enumerate(sys.argv):
        if arg == "--threads" and i + 1 < len(sys.argv):
            threads = int(sys.argv[i + 1])
        elif arg.startswith("--threads="):
            threads = int(arg.split("=", 1)[1])
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(threads)
    return threads
