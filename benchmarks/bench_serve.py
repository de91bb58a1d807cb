"""`unirag serve` under load: search latency/throughput over HTTP vs in-process, and a flaky generator.

1. Baseline, measured in the same run: the in-process ``unirag.Retriever.search(text=...)`` on the same
   queries, one after another (p50/p99 latency, queries per second).
2. ``unirag serve`` as a real process (uvicorn) on a free loopback port; ``POST /v1/search`` with
   1 client, then with 16 concurrent clients (keep-alive connections, one thread each).
   Targets: p50 at 1 client <= in-process p50 + 15 ms; 16 clients >= 1.5x the 1-client throughput,
   0 errors.
3. The service with an OpenAI-compatible generator (``tests/fake_openai_server.py``) that fails a
   seeded 10 % of calls (half 429 with Retry-After, half 500) after ``--latency`` seconds;
   ``POST /v1/caption`` from 16 clients. Target: 0 lost requests (every request answered 200).

Queries are the bundled sample's 255 real COCO captions (``src/unirag/demo/data``), whose index is
built with the offline encoder unless ``--index`` is given.

    .venv/bin/python benchmarks/bench_serve.py                    # 600 searches per setting, 200 captions
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _harness import REPO  # first: it puts tests/ on sys.path

from fake_openai_server import FakeServer, Reply

SAMPLE = REPO / "src" / "unirag" / "demo" / "data"


def build_demo_index(out: Path) -> Path:
    from unirag.data.importers.coco import import_coco
    from unirag.encoders.registry import load_encoder
    from unirag.index.build import build_index

    import_coco(SAMPLE / "captions.json", SAMPLE / "images", out / "data", show_progress=False)
    build_index(out / "data" / "pool.jsonl", (SAMPLE / "images").resolve(), out / "index", load_encoder(None),
                progress=False)
    return out / "index"


def sample_captions() -> list[str]:
    data = json.loads((SAMPLE / "captions.json").read_text())
    return [a["caption"].strip() for a in data["annotations"]]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def summary(latencies: list[float], wall: float, errors: int) -> dict:
    return {"n": len(latencies), "qps": len(latencies) / wall, "p50_ms": 1000 * pct(latencies, 50),
            "p99_ms": 1000 * pct(latencies, 99), "mean_ms": 1000 * statistics.fmean(latencies), "errors": errors}


def in_process(index: Path, queries: list[str], k: int) -> dict:
    """``unirag.Retriever.search(text=...)`` one query after another, timed on the main thread and on a
    worker thread; the faster counts (under CPU contention torch's intra-op pool can be several times
    slower on the main thread, and the service searches on a worker thread)."""
    import unirag

    retriever = unirag.Retriever(index).warm_up()

    def timed() -> dict:
        for q in queries[:20]:
            retriever.search(text=q, k=k)
        lat = []
        start = time.perf_counter()
        for q in queries:
            t = time.perf_counter()
            retriever.search(text=q, k=k)
            lat.append(time.perf_counter() - t)
        return summary(lat, time.perf_counter() - start, 0)

    main_thread = timed()
    with ThreadPoolExecutor(1) as pool:
        worker = pool.submit(timed).result()
    return min(main_thread, worker, key=lambda s: s["p50_ms"])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Service:
    """``unirag serve`` in a subprocess; ``url`` once /healthz answers."""

    def __init__(self, index: Path, *extra: str, env: dict | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile(prefix="bench-serve-", suffix=".log", delete=False)
        self.proc = subprocess.Popen([sys.executable, "-m", "unirag", "serve", "--index", str(index),
                                      "--port", str(self.port), "--log-level", "warning", *extra],
                                     stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
        deadline = time.monotonic() + 300
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"unirag serve exited: {Path(self.log.name).read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit("unirag serve did not start") from None
                time.sleep(0.3)

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def http_load(url: str, path: str, requests: list[dict], clients: int, timeout: float = 120) -> tuple[dict, list]:
    """Send ``requests`` (httpx ``post`` keyword arguments) from ``clients`` threads, one connection each."""
    import httpx

    lat: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    items = iter(enumerate(requests))

    def worker() -> None:
        with httpx.Client(base_url=url, timeout=timeout) as client:
            while True:
                with lock:
                    nxt = next(items, None)
                if nxt is None:
                    return
                t = time.perf_counter()
                try:
                    r = client.post(path, **nxt[1])
                    ok = r.status_code == 200
                    why = f"{r.status_code} {r.text[:200]}"
                except httpx.HTTPError as e:
                    ok, why = False, repr(e)
                took = time.perf_counter() - t
                with lock:
                    lat.append(took)
                    if not ok:
                        errors.append(why)

    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        for f in [pool.submit(worker) for _ in range(clients)]:
            f.result()
    return summary(lat, time.perf_counter() - start, len(errors)), errors


class FlakyChat:
    """Fails a seeded share of calls transiently (half 429 + Retry-After, half 500)."""

    def __init__(self, rate: float, seed: int) -> None:
        self.rng, self.rate, self.lock = random.Random(seed), rate, threading.Lock()
        self.calls = self.injected = 0

    def __call__(self, req) -> Reply:
        with self.lock:
            self.calls += 1
            fail, kind = self.rng.random() < self.rate, self.rng.random()
            self.injected += fail
        if fail:
            return Reply.error(429, "rate limited", retry_after="0.2") if kind < 0.5 else Reply.error(500, "oops")
        return Reply.chat("a photo of something", prompt_tokens=800, completion_tokens=6)


def line(name: str, s: dict) -> str:
    return (f"  {name:<28}{s['qps']:>9.1f}{s['p50_ms']:>10.1f}{s['p99_ms']:>10.1f}{s['errors']:>8d}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", type=Path, default=None, help="index to serve (default: build the bundled sample's)")
    ap.add_argument("--searches", type=int, default=600, help="searches per setting")
    ap.add_argument("--captions", type=int, default=200, help="caption requests in the flaky-generator run")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--latency", type=float, default=0.2, help="fake generator latency (s)")
    ap.add_argument("--failure-rate", type=float, default=0.10)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    index = args.index or build_demo_index(tmp)
    captions = sample_captions()
    queries = [captions[i % len(captions)] for i in range(args.searches)]

    base = in_process(index, queries, args.k)
    service = Service(index)
    try:
        warm = [{"data": {"text": q, "k": str(args.k)}} for q in queries[:20]]
        http_load(service.url, "/v1/search", warm, 1)
        reqs = [{"data": {"text": q, "k": str(args.k)}} for q in queries]
        one, err1 = http_load(service.url, "/v1/search", reqs, 1)
        many, err16 = http_load(service.url, "/v1/search", reqs, args.clients)
    finally:
        service.close()

    flaky = FlakyChat(args.failure_rate, args.seed)
    photos = sorted((SAMPLE / "images").glob("*.jpg"))
    with FakeServer(responder=flaky, latency=args.latency) as srv:
        service = Service(index, "--generator", "openai:gpt-4o", "--base-url", srv.url, "--concurrency",
                          str(args.clients), env={"OPENAI_API_KEY": "sk-bench-not-a-real-key"})
        try:
            reqs = [{"files": {"image": (p.name, p.read_bytes(), "image/jpeg")}, "data": {"mode": "rag", "k": "2"}}
                    for p in (photos[i % len(photos)] for i in range(args.captions))]
            cap, cap_errors = http_load(service.url, "/v1/caption", reqs, args.clients)
        finally:
            service.close()

    print(f"\nunirag serve, offline encoder, bundled sample ({args.searches} text searches, k={args.k}; "
          f"{os.cpu_count()} CPUs)")
    print(f"  {'setting':<28}{'req/s':>9}{'p50 ms':>10}{'p99 ms':>10}{'errors':>8}")
    print(line("in-process search (base)", base))
    print(line("HTTP, 1 client", one))
    print(line(f"HTTP, {args.clients} clients", many))
    print(line("caption, flaky generator", cap))
    over = one["p50_ms"] - base["p50_ms"]
    ratio = many["qps"] / one["qps"]
    checks = {
        f"p50 at 1 client <= in-process + 15 ms (overhead {over:+.1f} ms)": over <= 15,
        f"{args.clients} clients >= 1.5x 1-client throughput ({ratio:.2f}x)": ratio >= 1.5,
        f"0 search errors ({one['errors'] + many['errors']})": one["errors"] + many["errors"] == 0,
        f"0 lost caption requests with {args.failure_rate:.0%} generator failures ({flaky.injected} injected of "
        f"{flaky.calls} calls; {cap['errors']} lost)": cap["errors"] == 0 and cap["n"] == args.captions,
    }
    print("\nTargets:")
    for name, ok in checks.items():
        print(f"  [{'met' if ok else 'MISSED'}] {name}")
    for e in (err1 + err16 + cap_errors)[:5]:
        print("  error:", e)
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
