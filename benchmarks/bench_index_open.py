"""What the integrity check on open costs (issue 29, point 5; not part of the test suite).

``Index.open`` checks that a sample of each shard's rows is finite (``OPEN_SAMPLE_ROWS`` rows spread
evenly, one page read each; see :mod:`unirag.index.store`). This script builds a flat index of ``--n``
random unit vectors of size ``--dim`` and prints the median open time with the check and without it
(the check replaced by a no-op in this process), and the difference. The pages the sample touches are
in the page cache after the build or the first open; on a cold cache each sampled row costs one disk read.

Usage:  python benchmarks/bench_index_open.py [--n 200000] [--dim 512] [--repeats 7] [--keep DIR]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np


def build(out: Path, n: int, dim: int) -> None:
    from unirag.data.records import Modality
    from unirag.index.writer import IndexWriter

    rng = np.random.default_rng(0)
    step = 50_000

    def chunks():
        for start in range(0, n, step):
            v = rng.standard_normal((min(step, n - start), dim)).astype(np.float32)
            v /= np.linalg.norm(v, axis=1, keepdims=True)
            metas = [{"did": f"t{i}", "txt": "x", "img_path": None, "source_id": None}
                     for i in range(start, start + len(v))]
            yield Modality.TEXT, metas, v

    info = {"name": "random", "spec": None, "dim": dim, "config": {}, "fingerprint": None}
    with IndexWriter(out, dim, info) as writer:
        for chunk in chunks():
            writer.add(*chunk)
        writer.commit()


def median_open_ms(out: Path, repeats: int) -> float:
    from unirag.index.handle import Index

    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        Index.open(out)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--keep", type=Path, default=None, help="Build (or reuse) the index here instead of a temp dir.")
    args = ap.parse_args()

    import unirag.index.store as store

    tmp = None
    out = args.keep
    if out is None:
        tmp = Path(tempfile.mkdtemp(prefix="bench-open-"))
        out = tmp / "index"
    try:
        if not (out / "manifest.json").exists():
            t = time.perf_counter()
            build(out, args.n, args.dim)
            print(f"built {args.n} x {args.dim} flat index in {time.perf_counter() - t:.1f}s at {out}")
        with_check = median_open_ms(out, args.repeats)
        real = store._check_sample
        store._check_sample = lambda index, path: None
        try:
            without = median_open_ms(out, args.repeats)
        finally:
            store._check_sample = real
        print(f"open, median of {args.repeats}: {with_check:.2f} ms with the sampled check "
              f"({store.OPEN_SAMPLE_ROWS} rows/shard), {without:.2f} ms without; "
              f"extra {with_check - without:.2f} ms (ratio {with_check / max(without, 1e-9):.1f}x)")
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
