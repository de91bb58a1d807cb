"""Ray generation workers decoding the next call's images ahead of the model: decode workers 0 vs N.

Run by hand (not part of the test suite). A caption run of ``--queries`` image queries (the full-size
COCO-mini photos, repeated under distinct ids), each with ``--k`` example pairs (the next photos), goes
through ``unirag.pipelines.caption.run_captioning`` with ``engine="ray"`` and one worker, once per
``--decode-workers`` value. The model is a stand-in of fixed cost, what a GPU looks like to the CPU:
it loads every image of its prompts with ``load_rgb`` (as a VLM's processor input does) and then
sleeps ``--model-ms`` per prompt (the GPU's time; a sleeping thread leaves the CPU to the decode
processes, as a GPU does). Inline (0), the model's thread decodes every image and then "runs the
model"; with decode workers, the next call's images are decoded while the model works on this one.

Printed per setting: the generation seconds (Ray start-up and model load excluded: the worker group is
started first and reused), queries/s, the ratio to decode workers 0 measured in the same run, and
whether the captions are identical. Lower bound for the ratio: 1; upper bound: (decode + model) /
max(decode, model) per call.

Usage:
  python benchmarks/bench_ray_decode_ahead.py                        # 64 queries, k 2, 0 vs 1 workers
  python benchmarks/bench_ray_decode_ahead.py --queries 128 --decode-workers 0,1,2 --model-ms 40
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
COCO = REPO / "tests" / "fixtures" / "coco-mini"
#: the stand-in model's time per prompt, read by the workers (UNIRAG_* variables reach them)
MODEL_MS_ENV = "UNIRAG_BENCH_MODEL_MS"


class StandInCaptioner:
    """Loads each prompt's images (``ImagePart.load`` = ``load_rgb``), sleeps the model's time, and
    captions with the images' sizes and pixel sums (so a wrong image would change the caption)."""

    template_family = "gpt4o"

    def __init__(self, batch_size: int = 4) -> None:
        self.batch_size = batch_size

    def generate(self, messages, options=None):
        return self.generate_batch([messages], options)[0]

    def generate_batch(self, batch, options=None):
        import numpy as np

        from unirag.generators.base import Generation, Usage

        out = []
        for messages in batch:
            parts = [p for m in messages for p in m.images]
            sums = [int(np.asarray(p.load(), dtype=np.uint64)[::37, ::37].sum()) for p in parts]
            out.append(Generation(text=" ".join(map(str, sums)), usage=Usage(input_images=len(parts))))
        time.sleep(float(os.environ.get(MODEL_MS_ENV, "30")) / 1000 * len(batch))
        return out

    def config(self) -> dict:
        return {"model": "stand-in captioner"}


def make_standin(batch_size: int = 4) -> StandInCaptioner:
    return StandInCaptioner(batch_size)


def _inputs(work: Path, n: int, k: int) -> dict:
    from unirag.data.mbeir import write_queries
    from unirag.data.records import Modality, Query

    rows = [json.loads(x) for x in (COCO / "captions.jsonl").read_text().splitlines() if x.strip()]
    queries, lines = [], []
    for i in range(n):
        r = rows[i % len(rows)]
        queries.append(Query(qid=f"q{i}", modality=Modality.IMAGE, img_path=r["image"]))
        pairs = []
        for d in range(1, k + 1):
            o = rows[(i + d) % len(rows)]
            pairs.append({"image_did": f"img{o['image_id']}", "text_did": f"txt{o['image_id']}",
                          "img_path": o["image"], "txt": o["captions"][0], "score": 1.0 - d / 10, "via": "pairing"})
        cands = [{"did": p["text_did"], "score": p["score"], "modality": "text"} for p in pairs]
        lines.append(json.dumps({"qid": f"q{i}", "candidates": cands, "pairs": pairs}))
    write_queries(work / "queries.jsonl", queries)
    (work / "run.jsonl").write_text("\n".join(lines) + "\n")
    return {"queries": work / "queries.jsonl", "run": work / "run.jsonl"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=64)
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--model-ms", type=float, default=30.0, help="the stand-in model's time per prompt")
    ap.add_argument("--decode-workers", default="0,1", help="comma-separated; the first is the baseline")
    ap.add_argument("--repeat", type=int, default=1, help="rounds over the settings (best of)")
    args = ap.parse_args()

    sys.path.insert(0, str(Path(__file__).resolve().parent))  # python:bench_ray_decode_ahead:make_standin
    os.environ[MODEL_MS_ENV] = str(args.model_ms)
    from unirag.pipelines.caption import CaptionConfig, run_captioning
    from unirag.runs.engine import EngineOptions, WorkerPool

    settings = [int(x) for x in args.decode_workers.split(",")]
    spec = "python:bench_ray_decode_ahead:make_standin"
    best: dict[int, float] = {}
    captions: dict[int, list] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data = _inputs(work, args.queries, args.k)
        for rnd in range(args.repeat):
            for w in settings:
                options = EngineOptions(engine="ray", workers=1, decode_workers=w)
                with WorkerPool(options) as pool:
                    out = work / f"r{rnd}-w{w}"
                    cfg = CaptionConfig(queries=data["queries"], generator=spec, out=out, mode="rag", k=args.k,
                                        images_root=COCO, retrieval=data["run"], engine=pool, progress=False,
                                        generator_options={"batch_size": args.batch_size}, save_prompts=0)
                    from unirag.pipelines.remote_models import ModelRecipe

                    pool.describe(ModelRecipe(spec, {"batch_size": args.batch_size}))  # start + load first
                    t0 = time.perf_counter()
                    result = run_captioning(cfg)
                    seconds = time.perf_counter() - t0
                assert result["counts"]["ok"] == args.queries, result
                recs = sorted((json.loads(x)["qid"], json.loads(x)["caption"])
                              for x in (out / "outputs.jsonl").read_text().splitlines() if x.strip())
                captions.setdefault(w, recs)
                best[w] = min(best.get(w, float("inf")), seconds)
                print(f"round {rnd + 1}: decode workers {w}: {seconds:.2f} s, load average "
                      f"{os.getloadavg()[0]:.1f}", flush=True)
    base = settings[0]
    images = args.queries * (1 + args.k)
    print(f"\n{args.queries} queries x {1 + args.k} full-size photos, batch {args.batch_size}, stand-in model "
          f"{args.model_ms:g} ms per prompt, 1 Ray worker, best of {args.repeat}")
    print("| decode workers | generation s | queries/s | images/s | vs decode workers "
          f"{base} | captions identical |")
    print("|---|---|---|---|---|---|")
    for w in settings:
        s = best[w]
        print(f"| {w} | {s:.2f} | {args.queries / s:.1f} | {images / s:.1f} | {best[base] / s:.2f} | "
              f"{captions[w] == captions[base]} |")


if __name__ == "__main__":
    main()
