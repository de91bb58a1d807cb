"""FID-feature extraction with the image files decoded in decode workers (CPU; not part of the suite).

What a GPU sees when it computes FID over 5k-30k images: the network is fast, so decoding the JPEGs
and turning them into uint8 arrays is the bound. Here the network is a stand-in of near-zero cost
(each image's mean colour over a sparse grid of pixels), so the figure is the decoding alone: ``unirag.metrics.images
.frechet_distance`` over ``--n`` real + ``--n`` generated full-size COCO photos (the 51 of
``tests/fixtures/coco-mini`` plus, when the folder exists, the 159 of ``--coco``, repeated to ``--n``)
at each ``--workers`` setting, against one core's plain ``load_uint8`` loop over the same files,
measured in the same run, in rounds (each round runs every setting once; the best of ``--repeat``
rounds is kept), so a drift of the shared machine's load hits them alike. Checks that every setting
gives exactly the same FID. Also prints the CPU time per image spent in the process that runs the
network (``time.process_time``): what decode workers take off it, the figure that matters on a GPU
machine with cores to spare even where this 2-core machine cannot show a wall-clock gain.

Usage:  python benchmarks/bench_metric_decode.py [--n 300] [--repeat 2] [--workers 0,2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bench_pipeline import DEFAULT_COCO, photos  # the same full-size photos (benchmarks/ is on sys.path)


def mean_colour():
    """A feature network of near-zero cost: uint8 (B, 3, H, W) -> each image's mean colour over every
    16th pixel of every 16th row (B, 3): converting whole photos to float would cost ~3 ms each."""
    import torch

    class MeanColour(torch.nn.Module):
        num_features = 3

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x[:, :, ::16, ::16].float().mean(dim=(2, 3))

    return MeanColour()


def load() -> str:
    return open("/proc/loadavg").read().split()[0] if Path("/proc/loadavg").exists() else "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=300, help="images per set (real and generated)")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--workers", default="0,2", help="decode-workers settings to measure (0 first: the baseline)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--coco", type=Path, default=DEFAULT_COCO)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    import torch

    from unirag.metrics.images import frechet_distance, load_uint8
    from unirag.runs.engine import EngineOptions
    from unirag.runtime import available_cores

    torch.set_num_threads(1)
    files = photos(args.coco)
    real = [files[i % len(files)] for i in range(args.n)]
    fake = [files[(i + len(files) // 2) % len(files)] for i in range(args.n)]
    settings = [s.strip() for s in args.workers.split(",") if s.strip()]
    net = mean_colour()
    print(f"# {args.n} real + {args.n} generated images over {len(files)} distinct full-size COCO photos; "
          f"{available_cores()} cores; load {load()}")

    def plain_loop() -> None:
        for p in real + fake:
            load_uint8(p)

    best: dict[str, float] = {}
    cpu: dict[str, float] = {}  # CPU seconds of this process (the one that runs the network)
    fids: dict[str, float] = {}
    loads: dict[str, str] = {}
    for _ in range(args.repeat):
        for name, fn in [("plain", plain_loop)] + [
                (s, lambda s=s: fids.__setitem__(s, frechet_distance(real, fake, net, batch_size=args.batch_size,
                                                                     engine=EngineOptions(decode_workers=s))))
                for s in settings]:
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            dt, dc = time.perf_counter() - t0, time.process_time() - c0
            best[name] = min(best.get(name, dt), dt)
            cpu[name] = min(cpu.get(name, dc), dc)
            loads[name] = load()
    n_images = 2 * args.n
    rows = {name: n_images / t for name, t in best.items()}
    base = settings[0]
    cpu_ms = {name: 1000 * c / n_images for name, c in cpu.items()}
    print(f"{'setting':<22}{'images/s':>10}{'vs plain loop':>15}{'vs ' + base:>10}"
          f"{'CPU ms/image here':>19}{'load':>7}")
    for name in ["plain", *settings]:
        label = "plain load_uint8 loop" if name == "plain" else f"decode-workers {name}"
        print(f"{label:<22}{rows[name]:>10.1f}{rows[name] / rows['plain']:>15.2f}"
              f"{rows[name] / rows[base] if name != 'plain' else float('nan'):>10.2f}"
              f"{cpu_ms[name]:>19.2f}{loads[name]:>7}")
    same = len(set(fids.values())) == 1
    print(f"FID identical in every setting: {same} ({fids[base]!r})")
    for s in settings[1:]:
        print(f"ratio decode-workers {s} / decode-workers {base}: {rows[s] / rows[base]:.2f}")
    if args.json:
        args.json.write_text(json.dumps({"n": args.n, "distinct_photos": len(files), "cores": available_cores(),
                                         "images_per_s": rows, "cpu_ms_per_image_here": cpu_ms, "fid": fids, "fid_identical": same,
                                         "load": loads}, indent=2))
    if not same:
        raise SystemExit("FID differs between settings")


if __name__ == "__main__":
    main()
