"""Throughput of API captioning: --concurrency 16 vs sequential, against a local chat-completions server.

The server (tests/fake_openai_server.py) answers every call after ``--latency`` seconds and fails a
seeded ``--failure-rate`` share of calls transiently (half 429 with Retry-After, half 500). Both
runs go through the real pipeline (``run_captioning``: prompt rendering, data URLs, retries,
durable store, compaction). Baseline: the same run with concurrency 1, measured in the same process.
Checks: every query ends ``ok``, none lost, none duplicated.

    .venv/bin/python benchmarks/bench_generation_api.py            # 500 queries, 200 ms, 10 % failures
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

from _harness import add_load_args, coco_rows, completeness, read_outputs  # first: it puts tests/ on sys.path

from fake_openai_server import FakeServer, Reply
from unirag.data.mbeir import write_queries
from unirag.data.records import Modality, Query
from unirag.pipelines.caption import CaptionConfig, run_captioning


def make_queries(coco: Path, n: int, path: Path) -> None:
    rows = coco_rows(coco)
    queries = [Query(qid=f"b{i:04d}", modality=Modality.IMAGE, img_path=rows[i % len(rows)]["image"])
               for i in range(n)]
    write_queries(path, queries)


class FlakyResponder:
    def __init__(self, rate: float, seed: int) -> None:
        self.rng = random.Random(seed)
        self.rate = rate
        self.lock = threading.Lock()
        self.injected = 0
        self.calls = 0

    def __call__(self, req) -> Reply:
        with self.lock:
            self.calls += 1
            fail = self.rng.random() < self.rate
            kind = self.rng.random()
            if fail:
                self.injected += 1
        if fail:
            return Reply.error(429, "rate limited", retry_after="0.2") if kind < 0.5 else Reply.error(500, "oops")
        return Reply.chat("a photo", prompt_tokens=800, completion_tokens=5)


def one_run(queries: Path, images_root: Path, out: Path, concurrency: int, args) -> dict:
    responder = FlakyResponder(args.failure_rate, args.seed)
    with FakeServer(responder=responder, latency=args.latency) as srv:
        cfg = CaptionConfig(queries=queries, generator="openai:gpt-4o", out=out, mode="zero-shot", k=0,
                            images_root=images_root, concurrency=concurrency, progress=False,
                            generator_options={"base_url": srv.url, "timeout": 10})
        t0 = time.perf_counter()
        summary = run_captioning(cfg)
        seconds = time.perf_counter() - t0
    lines = read_outputs(out)
    return {"concurrency": concurrency, "seconds": seconds, "qps": len(lines) / seconds,
            **completeness(lines, args.queries), "calls": responder.calls, "injected_failures": responder.injected,
            "retries": sum(r["attempts"] - 1 for r in lines), "counts": summary["counts"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_load_args(ap, queries=500)
    args = ap.parse_args()
    import openai  # noqa: F401 - import the SDK (seconds) before timing, so neither run pays for it

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        qfile = tmp / "queries.jsonl"
        make_queries(args.coco, args.queries, qfile)
        results = [one_run(qfile, args.coco, tmp / f"c{c}", c, args) for c in (1, args.concurrency)]
    for r in results:
        print(f"concurrency {r['concurrency']:>2}: {r['seconds']:7.1f} s  {r['qps']:6.2f} queries/s  "
              f"calls {r['calls']}  injected failures {r['injected_failures']}  retries {r['retries']}  "
              f"ok {r['ok']}/{args.queries}  lost {r['lost']}  duplicated {r['duplicated']}")
    seq, par = results
    ratio = par["qps"] / seq["qps"]
    print(f"speed-up concurrency {args.concurrency} vs sequential (baseline): {ratio:.1f}x (target >= 10x)")
    ok = all(r["ok"] == args.queries and not r["lost"] and not r["duplicated"] for r in results)
    print("all queries ok, 0 lost, 0 duplicated" if ok else "FAILED: lost, duplicated or failed queries")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
