"""`unirag serve` under load: search latency/throughput over HTTP vs in-process, and a flaky generator.

Searches run twice: with the offline encoder (a CPU model: 30-40 ms for one sentence, about 5 ms
each in a batch) and with a zero-cost ``python:`` encoder (``benchmarks/_zero_encoder.py``: what a
GPU model looks like to the service, so the service's own costs show).

1. Baseline, measured in the same run: the in-process ``unirag.Retriever.search(text=...)`` on the same
   queries, one after another (p50/p99 latency, queries per second).
2. ``unirag serve --workers 2`` (the CPU setting; ``--workers 1`` for one process) on a free loopback
   port; ``POST /v1/search`` as a multipart form with 1 client, then with 16 concurrent clients
   (keep-alive connections, one thread each), then the same searches as JSON bodies from 16 clients. The load client sends pre-encoded
   requests over plain sockets so that it costs the 2 shared cores as little as possible. The
   service's search batch sizes and busy time are read from ``/metrics`` (with ``--workers 2``,
   summed over the two processes: up to 200 %).
   Targets: p50 at 1 client <= in-process p50 + 15 ms; offline encoder at 16 clients >= 3x the
   in-process rate; zero-cost encoder at 16 clients >= 1.5x its 1-client rate and >= 400 req/s;
   0 errors.
3. The service with an OpenAI-compatible generator (``tests/fake_openai_server.py``) that fails a
   seeded 10 % of calls (half 429 with Retry-After, half 500) after ``--latency`` seconds;
   ``POST /v1/caption`` from 16 clients. Target: 0 lost requests (every request answered 200).

Queries are the bundled sample's 255 real COCO captions (``src/unirag/demo/data``), whose index is
built with the offline encoder unless ``--index`` is given.

    .venv/bin/python benchmarks/bench_serve.py                    # 600 searches per setting, 200 captions

``--before`` runs the HTTP part only and leaves out the targets (for a service from an older checkout:
``PYTHONPATH=old/src python benchmarks/bench_serve.py --before``).
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


ZERO_COST = "python:_zero_encoder:make"


def build_demo_index(out: Path, encoder: str | None = None) -> Path:
    """The bundled sample's index with ``encoder`` (None: the offline one)."""
    from unirag import Index
    from unirag.data.importers.coco import import_coco

    if not (out / "data" / "pool.jsonl").exists():
        import_coco(SAMPLE / "captions.json", SAMPLE / "images", out / "data", show_progress=False)
    name = "index-zero-cost" if encoder else "index"
    Index.build(out / "data" / "pool.jsonl", out / name, encoder=encoder,
                images_root=(SAMPLE / "images").resolve(), progress=False)
    return out / name


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
        workers = int(extra[extra.index("--workers") + 1]) if "--workers" in extra else 1
        seen: set = set()
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
            try:  # every worker: each listens once its model is loaded, and the load's connections come at once
                with urllib.request.urlopen(self.url + "/healthz", timeout=2) as r:
                    seen.add(json.loads(r.read()).get("process"))
                if len(seen) >= workers:
                    break
            except OSError:
                time.sleep(0.3)
            if time.monotonic() > deadline:
                raise SystemExit(f"unirag serve did not start ({len(seen)} of {workers} processes answered)")

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def form_body(fields: dict, files: dict | None = None) -> tuple[bytes, str]:
    """A multipart/form-data body and its content type (``files``: name -> (filename, bytes, type))."""
    boundary = "unirag-bench-boundary"
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
             for k, v in fields.items()]
    for name, (filename, data, ctype) in (files or {}).items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
                     f"Content-Type: {ctype}\r\n\r\n".encode() + data + b"\r\n")
    return b"".join(parts) + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def json_body(fields: dict) -> tuple[bytes, str]:
    return json.dumps(fields).encode(), "application/json"


class RawConnection:
    """One keep-alive HTTP/1.1 connection over a plain socket: the request bytes are built once and the
    response is read by its Content-Length. ``http.client`` parses every response's headers with
    ``email.parser`` in Python; on 2 shared cores the load generator's own CPU is taken from the
    service it measures, so the client does as little as a client can."""

    def __init__(self, host: str, port: int, timeout: float) -> None:
        self.address, self.timeout, self.sock, self.buf = (host, port), timeout, None, b""

    def post(self, request: bytes) -> tuple[int, bytes]:
        if self.sock is None:
            self.sock = socket.create_connection(self.address, timeout=self.timeout)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.buf = b""
        self.sock.sendall(request)
        while b"\r\n\r\n" not in self.buf:
            self._read()
        head, _, rest = self.buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])}
        if "content-length" not in headers:
            raise OSError(f"a response without Content-Length: {lines[0]!r}")
        size = int(headers["content-length"])
        while len(rest) < size:
            rest += self._read(keep=False)
        body, self.buf = rest[:size], rest[size:]
        if headers.get("connection", "").lower() == "close":
            self.close()
        return int(lines[0].split()[1]), body

    def _read(self, keep: bool = True) -> bytes:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise OSError("the server closed the connection")
        if keep:
            self.buf += chunk
        return chunk

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
        self.sock = None


def http_load(url: str, path: str, requests: list[tuple[bytes, str]], clients: int,
              timeout: float = 120) -> tuple[dict, list]:
    """POST pre-encoded ``(body, content type)`` requests from ``clients`` threads, one keep-alive
    connection each (:class:`RawConnection`, so the load generator takes little of the CPU it shares
    with the service)."""
    from urllib.parse import urlsplit

    host, port = urlsplit(url).hostname, urlsplit(url).port
    wire = [f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode() + body for body, ctype in requests]
    lat: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    items = iter(wire)

    def worker() -> None:
        conn = RawConnection(host, port, timeout)
        try:
            while True:
                with lock:
                    nxt = next(items, None)
                if nxt is None:
                    return
                t = time.perf_counter()
                try:
                    status, text = conn.post(nxt)
                    ok, why = status == 200, f"{status} {text[:200]!r}"
                except (OSError, ValueError, IndexError) as e:
                    ok, why = False, repr(e)
                    conn.close()
                took = time.perf_counter() - t
                with lock:
                    lat.append(took)
                    if not ok:
                        errors.append(why)
        finally:
            conn.close()

    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        for f in [pool.submit(worker) for _ in range(clients)]:
            f.result()
    return summary(lat, time.perf_counter() - start, len(errors)), errors


def counters(url: str) -> dict[str, float]:
    """The service's search counters so far (``/metrics``): batches, searches, and the seconds its
    search worker was busy."""
    text = urllib.request.urlopen(url + "/metrics", timeout=30).read().decode()
    values = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
              if line.startswith(("unirag_search_batch_size_", "unirag_search_busy_seconds_total"))}
    return {"batches": values.get("unirag_search_batch_size_count", 0.0),
            "searches": values.get("unirag_search_batch_size_sum", 0.0),
            "busy": values.get("unirag_search_busy_seconds_total", 0.0)}


def measured(url: str, requests: list[tuple[bytes, str]], clients: int) -> tuple[dict, list]:
    """:func:`http_load` on ``/v1/search`` with the mean batch size formed and the search worker's busy
    share of the time (near 1: the encoder limits the rate; lower: the web layer or the clients do)."""
    seen = counters(url)
    out, errors = http_load(url, "/v1/search", requests, clients)
    after = counters(url)
    out["batch"] = (after["searches"] - seen["searches"]) / max(1.0, after["batches"] - seen["batches"])
    out["busy"] = (after["busy"] - seen["busy"]) / (out["n"] / out["qps"])
    return out, errors


def search_settings(index: Path, queries: list[str], k: int, clients: int, before: bool,
                    env: dict | None = None, serve_args: tuple[str, ...] = ()) -> dict[str, dict]:
    """The HTTP settings for one index: 1 client and ``clients`` clients (forms), ``clients`` (JSON)."""
    forms = [form_body({"text": q, "k": str(k)}) for q in queries]
    service = Service(index, *serve_args, env=env)
    out = {}
    try:
        http_load(service.url, "/v1/search", forms[:20], 1)
        load = (lambda reqs, n: http_load(service.url, "/v1/search", reqs, n)) if before else \
            (lambda reqs, n: measured(service.url, reqs, n))
        out["HTTP, 1 client"], errors = load(forms, 1)
        # warmed up like the rows before it: the batcher's first batches after one client ramp up from one
        http_load(service.url, "/v1/search", forms[: 4 * clients], clients)
        out[f"HTTP, {clients} clients"], more = load(forms, clients)
        errors += more
        name = f"HTTP JSON, {clients} clients"
        out[name], more = load([json_body({"text": q, "k": k}) for q in queries], clients)
        if before and more:  # an older service without JSON searches
            out[name]["note"] = "not supported"
        else:
            errors += more
    finally:
        service.close()
    out["errors"] = errors
    return out


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
    if s.get("note"):
        return f"  {name:<30}{s['note']:>37}"
    batch = f"{s['batch']:>8.1f}{s['busy']:>8.0%}" if "batch" in s else ""
    return f"  {name:<30}{s['qps']:>9.1f}{s['p50_ms']:>10.1f}{s['p99_ms']:>10.1f}{s['errors']:>8d}{batch}"


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
    ap.add_argument("--workers", type=int, default=None,
                    help="unirag serve --workers (2, the CPU setting: one process encodes while the other runs "
                         "its Python; 1 to measure one process; 1 with --before)")
    ap.add_argument("--before", action="store_true", help="HTTP searches only, no targets (an older service)")
    args = ap.parse_args()
    args.workers = args.workers or (1 if args.before else 2)
    serve_args = ("--workers", str(args.workers)) if args.workers != 1 else ()

    tmp = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    captions = sample_captions()
    queries = [captions[i % len(captions)] for i in range(args.searches)]
    # the zero-cost encoder's module must import in the service process too
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(REPO / "benchmarks")]))}
    sys.path.insert(0, str(REPO / "benchmarks"))
    encoders = {"offline encoder": args.index or build_demo_index(tmp),
                "zero-cost encoder": build_demo_index(tmp, ZERO_COST)}
    results = {}
    for name, index in encoders.items():
        base = None if args.before else in_process(index, queries, args.k)
        results[name] = {"in-process search (base)": base,
                         **search_settings(index, queries, args.k, args.clients, args.before, env, serve_args)}

    print(f"\nunirag serve --workers {args.workers}, bundled sample ({args.searches} text searches, k={args.k}; "
          f"{os.cpu_count()} CPUs; load average before {os.getloadavg()[0]:.1f})")
    for name, rows in results.items():
        print(f"\n{name}\n  {'setting':<30}{'req/s':>9}{'p50 ms':>10}{'p99 ms':>10}{'errors':>8}{'batch':>8}{'busy':>8}")
        for setting, s in rows.items():
            if setting != "errors" and s is not None:
                print(line(setting, s))
    if args.before:
        return 0

    flaky = FlakyChat(args.failure_rate, args.seed)
    photos = sorted((SAMPLE / "images").glob("*.jpg"))
    with FakeServer(responder=flaky, latency=args.latency) as srv:
        service = Service(encoders["offline encoder"], *serve_args, "--generator", "openai:gpt-4o", "--base-url", srv.url,
                          "--concurrency", str(args.clients), env={"OPENAI_API_KEY": "sk-bench-not-a-real-key"})
        try:
            reqs = [form_body({"mode": "rag", "k": "2"}, {"image": (p.name, p.read_bytes(), "image/jpeg")})
                    for p in (photos[i % len(photos)] for i in range(args.captions))]
            cap, cap_errors = http_load(service.url, "/v1/caption", reqs, args.clients)
        finally:
            service.close()
    print(line("caption, flaky generator", cap))

    off, zero = results["offline encoder"], results["zero-cost encoder"]
    many = f"HTTP, {args.clients} clients"
    checks = {}
    for name, rows in results.items():
        over = rows["HTTP, 1 client"]["p50_ms"] - rows["in-process search (base)"]["p50_ms"]
        checks[f"{name}: p50 at 1 client <= in-process + 15 ms (overhead {over:+.1f} ms)"] = over <= 15
    ratio = off[many]["qps"] / off["in-process search (base)"]["qps"]
    checks[f"offline encoder: {args.clients} clients >= 3x the in-process rate ({ratio:.2f}x)"] = ratio >= 3
    ratio = zero[many]["qps"] / zero["HTTP, 1 client"]["qps"]
    checks[f"zero-cost encoder: {args.clients} clients >= 1.5x 1-client throughput ({ratio:.2f}x)"] = ratio >= 1.5
    checks[f"zero-cost encoder: {args.clients} clients >= 400 req/s ({zero[many]['qps']:.0f})"] = \
        zero[many]["qps"] >= 400
    errors = off["errors"] + zero["errors"]
    checks[f"0 search errors ({len(errors)})"] = not errors
    checks[f"0 lost caption requests with {args.failure_rate:.0%} generator failures ({flaky.injected} injected of "
           f"{flaky.calls} calls; {cap['errors']} lost)"] = cap["errors"] == 0 and cap["n"] == args.captions
    print("\nTargets:")
    for name, ok in checks.items():
        print(f"  [{'met' if ok else 'MISSED'}] {name}")
    for e in (errors + cap_errors)[:5]:
        print("  error:", e)
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
