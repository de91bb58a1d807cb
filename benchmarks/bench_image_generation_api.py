"""Throughput of API image generation: --concurrency 16 vs sequential, against a local images server.

The server (tests/fake_openai_server.py) answers /v1/images/edits after ``--latency`` seconds with a
256x256 PNG and fails a seeded ``--failure-rate`` share of calls transiently (half 429 with
Retry-After: 0, half 500). Both runs go through the real pipeline (``run_images`` with
``openai-image:gpt-image-1``, random few-shot k=1 on real COCO captions and photos: multipart upload
of the example JPEG, base64 decode, lossless PNG write, durable store). Baseline: the same run with
concurrency 1 in the same process. Checks: every query ends ``ok``, none lost, none duplicated.

    .venv/bin/python benchmarks/bench_image_generation_api.py          # 100 queries, 200 ms, 10 % failures
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import random
import tempfile
import threading
import time
from pathlib import Path

from _harness import add_load_args, coco_rows, completeness, read_outputs  # first: it puts tests/ on sys.path

from fake_openai_server import FakeServer, Reply
from unirag.data.mbeir import read_queries
from unirag.generators.registry import IMAGE, load_generator
from unirag.pipelines.image_gen import ImageConfig, run_images


def write_data(coco: Path, n: int, tmp: Path) -> tuple[Path, Path]:
    """n caption queries (cycling over the photos' captions) and an image pool of the photos."""
    rows = coco_rows(coco)
    pool = [{"did": f"img:{r['image_id']}", "txt": None, "img_path": r["image"], "modality": "image",
             "src_content": json.dumps({"source_id": str(r["image_id"])})} for r in rows]
    queries = []
    for i in range(n):
        r = rows[i % len(rows)]
        queries.append({"qid": f"b{i:04d}", "query_txt": r["captions"][(i // len(rows)) % 5], "query_img_path": None,
                        "query_modality": "text", "query_src_content": None,
                        "pos_cand_list": [f"img:{r['image_id']}"], "neg_cand_list": [], "task_id": 0})
    (tmp / "q.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    (tmp / "pool.jsonl").write_text("".join(json.dumps(c) + "\n" for c in pool))
    return tmp / "q.jsonl", tmp / "pool.jsonl"


class FlakyImages:
    def __init__(self, rate: float, seed: int) -> None:
        from PIL import Image

        buf = io.BytesIO()
        Image.effect_noise((256, 256), 40).convert("RGB").save(buf, format="PNG")
        self.b64 = base64.b64encode(buf.getvalue()).decode("ascii")
        self.rng, self.rate, self.lock = random.Random(seed), rate, threading.Lock()

    def __call__(self, req) -> Reply:
        with self.lock:
            roll = self.rng.random()
        if roll < self.rate / 2:
            return Reply.error(429, "rate limited", retry_after="0")
        if roll < self.rate:
            return Reply.error(500, "server error")
        return Reply(json={"created": 1, "data": [{"b64_json": self.b64}],
                           "usage": {"input_tokens": 300, "output_tokens": 272,
                                     "input_tokens_details": {"text_tokens": 100, "image_tokens": 200}}})


def one_run(args, queries_path: Path, pool_path: Path, out: Path, concurrency: int) -> tuple[float, dict]:
    with FakeServer(responder=FlakyImages(args.failure_rate, args.seed), latency=args.latency) as srv:
        gen = load_generator("openai-image:gpt-image-1", IMAGE, base_url=srv.url)
        queries = read_queries(queries_path)
        start = time.perf_counter()
        run_images(ImageConfig(queries=queries, generator=gen.spec, out=out, mode="random", k=1, pool=pool_path,
                               pool_images_root=args.coco, concurrency=concurrency, progress=False), gen)
        seconds = time.perf_counter() - start
        gen.close()
    lines = read_outputs(out)
    check = {**completeness(lines, len(queries)), "retried": sum(r["attempts"] > 1 for r in lines),
             "requests": len(srv.requests)}
    return seconds, check


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_load_args(ap, queries=100)
    args = ap.parse_args()
    os.environ.pop("OPENAI_API_KEY", None)
    import openai  # noqa: F401 - import the SDK before timing, so neither run pays for it
    with tempfile.TemporaryDirectory(prefix="bench-img-") as tmp:
        tmp = Path(tmp)
        qpath, ppath = write_data(args.coco, args.queries, tmp)
        seq_s, seq = one_run(args, qpath, ppath, tmp / "seq", 1)
        par_s, par = one_run(args, qpath, ppath, tmp / "par", args.concurrency)
    print(f"{args.queries} queries, {args.latency * 1000:.0f} ms/call, {args.failure_rate:.0%} transient failures")
    print(f"sequential (baseline): {seq_s:7.2f} s  {args.queries / seq_s:6.1f} img/s  {seq}")
    print(f"concurrency {args.concurrency:<3}:    {par_s:7.2f} s  {args.queries / par_s:6.1f} img/s  {par}")
    print(f"speed-up vs sequential: {seq_s / par_s:.1f}x")
    bad = [c for c in (seq, par) if c["ok"] != args.queries or c["duplicated"] or c["lost"]]
    if bad:
        raise SystemExit(f"FAILED: lost/duplicated/failed outputs: {bad}")


if __name__ == "__main__":
    main()
