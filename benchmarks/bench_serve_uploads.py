"""`unirag serve` memory under worst-case uploads: small files that decode into huge images.

A 6000x6000 one-bit PNG is 4.4 KB on the wire, under the 40-megapixel limit, and 36 to 144 MB once
decoded. ``--requests`` (32) of them are sent at once to ``POST /v1/search`` of a real ``unirag serve``
process (the bundled sample's index, offline encoder) while its resident memory is sampled every few
milliseconds; the peak above the idle level is reported, in all and per request in flight. Idle is
measured after the same burst of ordinary photos, so the encoder's memory for such a batch is in it.
Target: the peak stays under 1 GB above idle; every request is answered 200 (or 503 with
Retry-After when more uploads arrive than the service queues for decoding), none is lost.

    .venv/bin/python benchmarks/bench_serve_uploads.py [--requests 32 --side 6000]
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench_serve import Service, build_demo_index, form_body


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def worst_png(side: int) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("1", (side, side)).save(buf, format="PNG", optimize=True)
    return buf.getvalue()


def post(port: int, body: bytes, ctype: str) -> int:
    """One ``POST /v1/search``; its status (-503 for a 503 without Retry-After)."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    try:
        conn.request("POST", "/v1/search", body, {"Content-Type": ctype})
        r = conn.getresponse()
        r.read()
        return r.status if r.status != 503 or r.getheader("Retry-After") else -503
    finally:
        conn.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", type=Path, default=None, help="index to serve (default: build the bundled sample's)")
    ap.add_argument("--requests", type=int, default=32, help="uploads sent at once")
    ap.add_argument("--side", type=int, default=6000, help="image side in pixels")
    ap.add_argument("--rounds", type=int, default=2, help="times the burst is sent")
    args = ap.parse_args()

    index = args.index or build_demo_index(Path(tempfile.mkdtemp(prefix="bench-uploads-")))
    png = worst_png(args.side)
    body, ctype = form_body({"k": "5"}, {"image": ("bomb.png", png, "image/png")})
    service = Service(index)
    pid = service.proc.pid
    statuses: list[int] = []
    try:
        # Idle means warm: the same burst of ordinary photos first (the sample's 640x480 JPEGs), so the
        # image encoder's own memory for a batch of this size is in the baseline, not in the peak.
        from bench_serve import SAMPLE

        photos = sorted((SAMPLE / "images").glob("*.jpg"))
        warm = [form_body({"k": "5"}, {"image": (p.name, p.read_bytes(), "image/jpeg")})
                for p in (photos[i % len(photos)] for i in range(args.requests))]
        with ThreadPoolExecutor(args.requests) as pool:
            list(pool.map(lambda req: post(service.port, *req), warm))
        time.sleep(1)
        idle = rss_bytes(pid)
        peak = idle
        stop = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not stop.is_set():
                peak = max(peak, rss_bytes(pid))
                time.sleep(0.005)

        def one(_: int) -> int:
            return post(service.port, body, ctype)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        start = time.perf_counter()
        for _ in range(args.rounds):
            with ThreadPoolExecutor(args.requests) as pool:
                statuses += list(pool.map(one, range(args.requests)))
        took = time.perf_counter() - start
        stop.set()
        sampler.join()
        after = rss_bytes(pid)
    finally:
        service.close()

    above = peak - idle
    mb = 1024 * 1024
    print(f"\n{args.rounds} x {args.requests} concurrent uploads of a {args.side}x{args.side} PNG "
          f"({len(png) / 1024:.1f} KB) to POST /v1/search, {took:.1f} s")
    print(f"  server RSS idle {idle / mb:.0f} MB, peak {peak / mb:.0f} MB (+{above / mb:.0f} MB, "
          f"{above / mb / args.requests:.1f} MB per request in flight), after {after / mb:.0f} MB")
    counts = {s: statuses.count(s) for s in sorted(set(statuses))}
    print(f"  statuses: {counts}")
    checks = {f"peak under 1 GB above idle (+{above / mb:.0f} MB)": above < 1024 * mb,
              f"every request answered 200 or 503 with Retry-After ({counts})":
                  set(statuses) <= {200, 503} and len(statuses) == args.rounds * args.requests}
    print("\nTargets:")
    for name, ok in checks.items():
        print(f"  [{'met' if ok else 'MISSED'}] {name}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
