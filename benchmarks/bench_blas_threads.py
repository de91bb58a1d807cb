"""The offline encoder's text batches with numpy's BLAS on one thread (what unirag sets once a torch
model loads, ``unirag.runtime.configure_torch_threads``) against the BLAS default (one thread per core).

The offline encoder projects MiniLM's vectors into its joint space with numpy after each forward pass;
with more than one BLAS thread, OpenBLAS's idle threads spin on the cores torch's threads need for the
next forward pass. Each setting runs in a fresh interpreter (the limit is process-wide); the baseline
is the BLAS default, measured in the same run. The vectors agree to float rounding: OpenBLAS splits
some products' sums between its threads, so the last bits depend on the thread count (as they
already did on the machine's core count).

    .venv/bin/python benchmarks/bench_blas_threads.py            # 15 batches of 14 captions, 3 rounds
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import json, sys, time
import numpy as np
from pathlib import Path
import unirag.demo
from unirag.encoders.offline import OfflineEncoder
caps = [a["caption"].strip() for a in json.loads((Path(unirag.demo.__file__).parent / "data" / "captions.json")
                                                  .read_text())["annotations"]]
batch, n = int(sys.argv[1]), int(sys.argv[2])
batches = [caps[i * batch:(i + 1) * batch] for i in range(n)]
enc = OfflineEncoder()
for b in batches[:2]:
    enc.encode_texts(b)
cpu, wall = time.process_time(), time.perf_counter()
vecs = [enc.encode_texts(b) for b in batches]
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
np.save(sys.argv[3], np.concatenate(vecs))
print(json.dumps({"wall_ms": 1000 * wall / (batch * n), "cpu_ms": 1000 * cpu / (batch * n)}))
"""


def run(batch: int, n: int, blas: str | None, out: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if blas is not None:
        env["OPENBLAS_NUM_THREADS"] = blas  # set by the user: unirag leaves it
    out = subprocess.run([sys.executable, "-c", CHILD, str(batch), str(n), out], env=env, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=14, help="captions per batch (16 clients form about 14)")
    ap.add_argument("--batches", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    cores = len(os.sched_getaffinity(0))
    print(f"offline encoder, encode_texts, {args.batches} batches of {args.batch} captions; {cores} cores; "
          f"load {os.getloadavg()[0]:.1f}")
    import numpy as np

    ratios, diff = [], 0.0
    tmp = Path(tempfile.mkdtemp(prefix="bench-blas-"))
    for r in range(args.rounds):
        default = run(args.batch, args.batches, str(cores), str(tmp / "default.npy"))
        one = run(args.batch, args.batches, None, str(tmp / "one.npy"))
        diff = max(diff, float(np.abs(np.load(tmp / "default.npy") - np.load(tmp / "one.npy")).max()))
        ratios.append(default["wall_ms"] / one["wall_ms"])
        print(f"round {r + 1}: BLAS {cores} threads {default['wall_ms']:.2f} ms wall, {default['cpu_ms']:.2f} ms CPU "
              f"a query; one thread (unirag) {one['wall_ms']:.2f} ms wall, {one['cpu_ms']:.2f} ms CPU "
              f"-> {ratios[-1]:.2f}x  (load {os.getloadavg()[0]:.1f})")
    print(f"RATIO wall per query, BLAS default / one thread: median {sorted(ratios)[len(ratios) // 2]:.2f} "
          f"(target >= 1.0: never slower); max |vector difference| {diff:.1e} (target <= 1e-5: float rounding)")
    return 0 if diff <= 1e-5 and sorted(ratios)[len(ratios) // 2] >= 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
