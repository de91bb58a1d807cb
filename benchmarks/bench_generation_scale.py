"""Generation on Ray vs in this process: a tiny local VLM (captions) and a tiny diffusers pipeline (images).

Run by hand (not part of the test suite). For each of the two tasks, the same run of ``--queries``
queries (COCO-mini photos / their captions, repeated under distinct ids to reach the count) goes:

* ``local``: ``engine="local"``, the model loaded in this process (its load time is the start-up);
* ``ray``: ``engine="ray"`` with ``--workers`` workers on a local Ray (start-up = starting Ray plus
  every worker loading the model, printed separately from the generation time).

Printed: start-up, generation seconds, queries per second, the throughput ratio ray/local measured
in the same run, and whether both runs stored identical records (caption text or PNG pixels). On
CPU, floats summed over a different number of threads can round differently, so both engines are
given the same torch thread count per model (``--threads``, default 1) for the identity check.

Usage:
  python benchmarks/bench_generation_scale.py                      # 200 queries, 2 workers, both tasks
  python benchmarks/bench_generation_scale.py --queries 400 --workers 4 --gpus-per-worker 1 --tasks caption
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # tiny_models (random checkpoints built from configs, no download)
COCO = REPO / "tests" / "fixtures" / "coco-mini"


def _inputs(work: Path, n: int) -> dict[str, Path]:
    from unirag.data.mbeir import write_queries
    from unirag.data.records import Modality, Query

    rows = [json.loads(x) for x in (COCO / "captions.jsonl").read_text().splitlines() if x.strip()]
    image_q = [Query(qid=f"q{i}", modality=Modality.IMAGE, img_path=rows[i % len(rows)]["image"]) for i in range(n)]
    text_q = [Query(qid=f"t{i}", modality=Modality.TEXT, txt=rows[i % len(rows)]["captions"][(i // len(rows)) % 5])
              for i in range(n)]
    write_queries(work / "image_queries.jsonl", image_q)
    write_queries(work / "text_queries.jsonl", text_q)
    return {"caption": work / "image_queries.jsonl", "image": work / "text_queries.jsonl"}


def _config(task: str, queries: Path, out: Path, spec: str, engine, batch_size: int):
    if task == "caption":
        from unirag.pipelines.caption import CaptionConfig

        return CaptionConfig(queries=queries, generator=spec, out=out, mode="zero-shot", images_root=COCO,
                             max_tokens=8, engine=engine, progress=False, save_prompts=0,
                             generator_options={"device": "cpu", "batch_size": batch_size})
    from unirag.pipelines.image_gen import ImageConfig

    return ImageConfig(queries=queries, generator=spec, out=out, engine=engine, progress=False, save_prompts=0,
                       width=32, height=32, steps=2, guidance=3.0, image_seed=7,
                       generator_options={"device": "cpu"})


def _run(task: str, cfg, generator=None) -> None:
    if task == "caption":
        from unirag.pipelines.caption import run_captioning

        counts = run_captioning(cfg, generator)["counts"]
        assert counts["ok"] == counts["queries"], counts
    else:
        from unirag.pipelines.image_gen import run_images

        counts = run_images(cfg, generator)
        assert counts["total_ok"] == counts["total_queries"], counts


def _records(task: str, out: Path) -> list:
    recs = [json.loads(x) for x in (out / "outputs.jsonl").read_text().splitlines()]
    if task == "caption":
        return [(r["qid"], r["status"], r["caption"]) for r in recs]
    import numpy as np
    from PIL import Image

    return [(r["qid"], r["status"], np.asarray(Image.open(out / r["image"]).convert("RGB")).tobytes()) for r in recs]


def bench(task: str, spec: str, queries: Path, work: Path, args) -> dict:
    import torch

    from unirag.runs.engine import EngineOptions, WorkerPool

    torch.set_num_threads(args.threads)
    os.environ["UNIRAG_TORCH_THREADS"] = str(args.threads)
    # local: the model's load is its start-up
    t0 = time.perf_counter()
    if task == "caption":
        from unirag.pipelines.captioner import Captioner

        generator = Captioner(spec, max_tokens=8, device="cpu", batch_size=args.batch_size).warm_up()
    else:
        from unirag.generators.registry import IMAGE, load_generator

        generator = load_generator(spec, IMAGE, device="cpu")
    local_start = time.perf_counter() - t0
    t0 = time.perf_counter()
    _run(task, _config(task, queries, work / f"{task}-local", spec, "local", args.batch_size), generator)
    local_gen = time.perf_counter() - t0
    generator.close()

    opts = EngineOptions(engine="ray", workers=args.workers, gpus_per_worker=args.gpus_per_worker,
                         ray_address=args.ray_address, threads_per_worker=args.threads,
                         object_store_memory=args.object_store_mb * 1024 * 1024)
    with WorkerPool(opts) as pool:
        t0 = time.perf_counter()
        if task == "caption":
            from unirag.pipelines.remote_models import ModelRecipe

            recipe = ModelRecipe(spec, {"device": "cpu", "batch_size": args.batch_size})
        else:
            from unirag.pipelines.remote_models import ModelRecipe

            recipe = ModelRecipe(spec, {"device": "cpu"}, "image")
        pool.describe(recipe)
        ray_start = time.perf_counter() - t0  # Ray started + every worker has loaded the model
        workers = len(pool.group(recipe).actors)  # the driver's one loop spreads the batches (no per-worker counts)
        t0 = time.perf_counter()
        _run(task, _config(task, queries, work / f"{task}-ray", spec, pool, args.batch_size))
        ray_gen = time.perf_counter() - t0
    same = _records(task, work / f"{task}-local") == _records(task, work / f"{task}-ray")
    n = args.queries
    return {"task": task, "queries": n, "local_startup_s": local_start, "local_gen_s": local_gen,
            "local_qps": n / local_gen, "ray_startup_s": ray_start, "ray_gen_s": ray_gen, "ray_qps": n / ray_gen,
            "ratio": local_gen / ray_gen, "identical": same, "workers": workers}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--gpus-per-worker", type=float, default=0)
    ap.add_argument("--ray-address", default=None)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per model (local and each worker)")
    ap.add_argument("--batch-size", type=int, default=4, help="caption prompts per forward pass")
    ap.add_argument("--object-store-mb", type=int, default=200)
    ap.add_argument("--tasks", default="caption,image")
    ap.add_argument("--workdir", type=Path, default=None)
    args = ap.parse_args()

    from tiny_models import tiny_llava_dir, tiny_sd_dir

    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-genscale-"))
    work.mkdir(parents=True, exist_ok=True)
    queries = _inputs(work, args.queries)
    specs = {"caption": f"hf:{tiny_llava_dir()}", "image": f"diffusers:{tiny_sd_dir()}"}
    rows = [bench(t, specs[t], queries[t], work, args) for t in args.tasks.split(",")]
    print(f"\n{os.cpu_count()} CPUs, {args.workers} Ray workers, {args.threads} torch thread(s) per model, "
          f"{args.queries} queries; work dir {work}")
    print("| task | local start-up s | local gen s | local q/s | ray start-up s | ray gen s | ray q/s | "
          "ray/local throughput | identical outputs | Ray workers |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['task']} | {r['local_startup_s']:.1f} | {r['local_gen_s']:.1f} | {r['local_qps']:.1f} | "
              f"{r['ray_startup_s']:.1f} | {r['ray_gen_s']:.1f} | {r['ray_qps']:.1f} | {r['ratio']:.2f}x | "
              f"{'yes' if r['identical'] else 'NO'} | {r['workers']} |")


if __name__ == "__main__":
    main()
