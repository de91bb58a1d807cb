"""MiniLM's linear layers on oneDNN (``unirag.runtime.onednn_linears``, what the text model uses on the
CPU) against torch's default MKL product, in one process, alternating rounds.

torch's CPU wheels send float32 linear layers to MKL, which takes its AVX2 path on AMD processors;
oneDNN, in the same wheel, uses AVX-512. The baseline is the same model with its layers put back to
``nn.Linear``, measured in the same run. Reported per query: batches of 14 captions (what 16 search
clients form at the service) and single captions (``Retriever.search`` one at a time).

    .venv/bin/python benchmarks/bench_onednn_linear.py        # 10 batches of 14 + 30 single, 5 rounds
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=14)
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--single", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    import numpy as np
    import torch

    import unirag.demo
    from unirag.encoders.text import SentenceTextEncoder

    caps = [a["caption"].strip() for a in json.loads((Path(unirag.demo.__file__).parent / "data" / "captions.json")
                                                      .read_text())["annotations"]]
    batches = [caps[i * args.batch:(i + 1) * args.batch] for i in range(args.batches)]
    singles = [[c] for c in caps[:args.single]]
    model = SentenceTextEncoder(device="cpu")
    layers = [m for m in model.model.modules() if isinstance(m, torch.nn.Linear)]
    fast = type(layers[0])
    if fast is torch.nn.Linear:
        print("this torch has no oneDNN linear: nothing to compare")
        return 1
    print(f"MiniLM text model, {len(layers)} linear layers; {torch.get_num_threads()} torch threads, "
          f"{len(os.sched_getaffinity(0))} cores; load {os.getloadavg()[0]:.1f}")

    def use(cls) -> None:
        for m in layers:
            m.__class__ = cls

    def per_query(groups) -> tuple[float, np.ndarray]:
        wall = time.perf_counter()
        vecs = np.concatenate([model._embed_texts(g) for g in groups])
        return 1000 * (time.perf_counter() - wall) / len(vecs), vecs

    seen: dict[str, list[float]] = {k: [] for k in ("mkl batch", "onednn batch", "mkl single", "onednn single")}
    diff = 0.0
    for cls in (torch.nn.Linear, fast):  # warm both
        use(cls)
        per_query(batches[:2])
    for r in range(args.rounds):
        out = {}
        for cls, name in ((torch.nn.Linear, "mkl"), (fast, "onednn")):
            use(cls)
            ms, out[name + " batch"] = per_query(batches)
            seen[name + " batch"].append(ms)
            ms, out[name + " single"] = per_query(singles)
            seen[name + " single"].append(ms)
        diff = max(diff, *(float(np.abs(out["mkl " + k] - out["onednn " + k]).max()) for k in ("batch", "single")))
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f}" for k, v in seen.items())
              + f" ms a query (load {os.getloadavg()[0]:.1f})")
    med = {k: sorted(v)[len(v) // 2] for k, v in seen.items()}
    batch, single = med["mkl batch"] / med["onednn batch"], med["mkl single"] / med["onednn single"]
    print(f"RATIO MKL / oneDNN wall per query, medians: batches of {args.batch} {batch:.2f}x (target >= 1.2), "
          f"single {single:.2f}x (target >= 1.0); max |vector difference| {diff:.1e} (target <= 1e-5)")
    return 0 if batch >= 1.2 and single >= 1.0 and diff <= 1e-5 else 1


if __name__ == "__main__":
    raise SystemExit(main())
