"""GPU smoke test: every local-model code path on a device, with tiny random models built here (no downloads).

    python scripts/gpu_smoke.py                  # CUDA: float16 and bfloat16
    python scripts/gpu_smoke.py --device cpu     # dry mode (bfloat16 only; what the test suite runs)

Steps, each timed, with the peak GPU memory it took and its agreement with the same step on CPU in
float32 (the reference, computed first):

1. ``index``: index build + image->text retrieval with a CLIP encoder (HF checkpoint and a UniIR CLIP-SF
   file), per precision; top-5 overlap with the CPU fp32 run, and the CPU fp32 index searched with the
   device encoder (an index built in one precision must serve queries in another);
2. ``caption``: an HF VLM (tiny LLaVA) caption batch; share of captions equal to CPU fp32;
3. ``diffusers``: a tiny Stable Diffusion pipeline, one image and a batch of two; mean absolute pixel
   difference to CPU fp32 (0..255);
4. ``xr``: X^R composed image retrieval with every agent on the local VLM and the CLIP encoder on the device.

Prints one ``key=value`` line per step and ``SMOKE OK`` at the end; exits 1 on the first failure.

``--bench OUT.json`` then runs ``benchmarks/bench_gpu.py`` (real-size architectures, random weights:
throughput and peak memory, see docs/throughput.md) on the same device, ``--tiny`` on CPU:

    python scripts/gpu_smoke.py --bench bench_gpu.json   # on a GPU machine: both, in one command
The tiny models come from ``tests/tiny_models.py`` and the photos from the bundled demo sample.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "cir"))
SAMPLE = ROOT / "src" / "unirag" / "demo" / "data"


def _gpu(device: str) -> bool:
    return device.startswith("cuda")


def measure(device: str, fn: Callable[..., object], *args: object) -> tuple[object, float, str]:
    """(``fn(*args)``, seconds, peak GPU memory in MiB or "n/a")."""
    import torch

    if _gpu(device):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    result = fn(*args)
    if _gpu(device):
        torch.cuda.synchronize()
        peak = f"{torch.cuda.max_memory_allocated() / 2**20:.1f}"
    else:
        peak = "n/a"
    return result, time.perf_counter() - start, peak


def report(step: str, **fields: object) -> None:
    print(" ".join([f"step={step}"] + [f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                                       for k, v in fields.items()]), flush=True)


def overlap(a: dict[str, list[str]], b: dict[str, list[str]]) -> float:
    """Mean share of each query's top-5 that both runs retrieved."""
    return sum(len(set(a[q][:5]) & set(b[q][:5])) / 5 for q in a) / len(a)


def build_data(work: Path, n_images: int) -> dict[str, Path]:
    from unirag.data.importers.coco import import_coco

    out = work / "data"
    import_coco(SAMPLE / "captions.json", SAMPLE / "images", out, limit=n_images, show_progress=False)
    return {"pool": out / "pool.jsonl", "i2t": out / "queries_task3_image2text.jsonl", "root": SAMPLE / "images"}


def index_step(device: str, dtypes: list[str], data: dict[str, Path], work: Path) -> None:
    from tiny_models import tiny_clip_dir, tiny_uniir_clip_sf
    from unirag import Index
    from unirag.data.mbeir import read_queries
    from unirag.encoders.registry import load_encoder
    from unirag.retrieval.retriever import Retriever

    queries = read_queries(data["i2t"])

    def run(spec: str, dev: str, dtype: str, out: Path, index: Path | None = None) -> dict[str, list[str]]:
        enc = load_encoder(spec, device=dev, dtype=dtype, **({"use_instructions": False} if "uniir:" in spec else {}))
        if index is None:
            Index.build(data["pool"], out, encoder=enc, images_root=data["root"], progress=False)
            index = out
        results = Retriever(index, enc).retrieve(queries, 5, "text", query_images_root=data["root"])
        enc.close()
        return {r.qid: r.dids for r in results}

    for name, spec in (("clip", str(tiny_clip_dir())), ("uniir-clip-sf", f"uniir:clip_sf:{tiny_uniir_clip_sf()}")):
        ref = run(spec, "cpu", "float32", work / f"idx-{name}-cpu")
        for dtype in dtypes:
            got, secs, peak = measure(device, run, spec, device, dtype, work / f"idx-{name}-{dtype}")
            cross = run(spec, device, dtype, work / "unused", index=work / f"idx-{name}-cpu")
            report("index", encoder=name, device=device, dtype=dtype, seconds=secs, peak_gpu_mib=peak,
                   queries=len(got), top5_overlap_vs_cpu_fp32=overlap(ref, got),
                   cpu_fp32_index_top5_overlap=overlap(ref, cross))


def caption_step(device: str, dtypes: list[str], data: dict[str, Path]) -> None:
    from tiny_models import tiny_llava_dir
    from unirag.generators.base import GenerationOptions
    from unirag.generators.registry import load_generator
    from unirag.prompts.caption import build_caption_prompt, caption_template

    images = sorted(data["root"].glob("*.jpg"))[:4]
    prompts = [build_caption_prompt(caption_template("llava"), p, []).messages for p in images]

    def run(dev: str, dtype: str) -> list[str]:
        gen = load_generator(f"hf:{tiny_llava_dir()}", device=dev, dtype=dtype, batch_size=4)
        try:
            return [g.text for g in gen.generate_batch(prompts, GenerationOptions(max_tokens=8))]
        finally:
            gen.close()

    ref = run("cpu", "float32")
    for dtype in dtypes:
        got, secs, peak = measure(device, run, device, dtype)
        same = sum(a == b for a, b in zip(ref, got, strict=True)) / len(ref)
        report("caption", device=device, dtype=dtype, seconds=secs, peak_gpu_mib=peak, batch=len(got),
               nonempty=sum(bool(t) for t in got), same_as_cpu_fp32=same)


def diffusers_step(device: str, dtypes: list[str]) -> None:
    import numpy as np

    from tiny_models import tiny_sd_dir
    from unirag.generators.images.base import ImageRequest
    from unirag.generators.registry import IMAGE, load_generator

    reqs = [ImageRequest(qid=f"q{i}", caption=c, width=32, height=32, steps=2, seed=1234 + i)
            for i, c in enumerate(["A red bus on a street.", "Two dogs on the grass."])]

    def run(dev: str, dtype: str) -> list:
        gen = load_generator(f"diffusers:{tiny_sd_dir()}", IMAGE, device=dev, dtype=dtype)
        try:
            one = gen.generate(reqs[0]).image
            return [one, *[g.image for g in gen.generate_batch(reqs)]]
        finally:
            gen.close()

    ref = [np.asarray(im, dtype=np.float32) for im in run("cpu", "float32")]
    for dtype in dtypes:
        got, secs, peak = measure(device, run, device, dtype)
        diff = float(np.mean([np.abs(np.asarray(g, np.float32) - r).mean() for g, r in zip(got, ref, strict=True)]))
        report("diffusers", device=device, dtype=dtype, seconds=secs, peak_gpu_mib=peak, images=len(got),
               mean_abs_pixel_diff_vs_cpu_fp32=diff)


def xr_step(device: str, dtype: str, work: Path) -> None:
    from xr_fixtures import make_world

    from tiny_models import tiny_clip_dir, tiny_llava_dir
    from unirag.cir.config import RoleConfig, XRConfig, XRSettings
    from unirag.cir.xr import XR

    ds = make_world(work / "xr-images")
    role = RoleConfig(model=f"hf:{tiny_llava_dir()}", max_tokens=6, options={"device": device, "dtype": dtype})
    roles = {r: role for r in ("caption", "vision_question", "text_imagination", "vision_imagination", "question",
                               "text_question")}
    cfg = XRConfig(roles=roles, encoder=str(tiny_clip_dir()), settings=XRSettings(k_prime=2, k=5, json_attempts=1))

    def run():
        return XR(cfg, cache_dir=work / "xr-cache", progress=False, echo=lambda _: None, device=device,
                  dtype=dtype).run(ds, work / "xr-out")

    metrics, secs, peak = measure(device, run)
    stages = ",".join(k for k, v in metrics.items() if isinstance(v, dict) and "n_queries" in v)
    report("xr", device=device, dtype=dtype, seconds=secs, peak_gpu_mib=peak, stages=stages or "none")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N, or cpu (dry mode: bfloat16 only)")
    parser.add_argument("--images", type=int, default=8, help="demo photos in the pool (5 captions each)")
    parser.add_argument("--work", type=Path, default=None, help="working folder (default: a temporary one)")
    parser.add_argument("--bench", type=Path, default=None, metavar="OUT.json",
                        help="afterwards run benchmarks/bench_gpu.py on the device and write its JSON here")
    args = parser.parse_args(argv)

    from unirag.runtime import resolve_device

    device = resolve_device(args.device)
    dtypes = ["float16", "bfloat16"] if device != "cpu" else ["bfloat16"]
    import torch

    gpu = torch.cuda.get_device_name(device) if _gpu(device) else "none"
    print(f"device={device} gpu={gpu!r} torch={torch.__version__} dtypes={','.join(dtypes)}", flush=True)
    with tempfile.TemporaryDirectory(prefix="unirag-gpu-smoke-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        data = build_data(work, args.images)
        index_step(device, dtypes, data, work)
        caption_step(device, dtypes, data)
        diffusers_step(device, dtypes)
        xr_step(device, dtypes[-1], work)
    print(f"SMOKE OK total_seconds={time.perf_counter() - started:.1f}", flush=True)
    if args.bench is not None:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        import bench_gpu

        return bench_gpu.main(["--device", device, "--out", str(args.bench)] + (["--tiny"] if device == "cpu" else []))
    return 0


if __name__ == "__main__":
    sys.exit(main())
