"""GPU throughput of real-size architectures with random weights (no download): what one GPU sustains.

    python benchmarks/bench_gpu.py                          # CUDA: bf16 and fp16, real sizes (< 8 min on an H200)
    python benchmarks/bench_gpu.py --device cpu --tiny      # dry mode: the same code on tiny configs (the test suite)

Every model is built from a config written below, its weights random (initialised on the device, in
the measured precision), so nothing is downloaded; throughput does not depend on the weights' values
(generation is forced to a fixed number of new tokens). For each model and precision, at each batch
size: throughput and peak GPU memory (``torch.cuda.max_memory_allocated``).

* ``clip-l14-224`` / ``clip-l14-336``: CLIP ViT-L/14 image tower at 224² / 336² (images/s);
* ``uniir-clip-sf-large``: UniIR CLIP-SF large layout (CLIP ViT-L/14 224, both towers: an image+text
  candidate is one image and one 77-token text forward, score-level sum) (items/s);
* ``uniir-blip-ff-large``: UniIR BLIP-FF large layout (BLIP ViT-L/16 at 384² + BERT-base text encoder
  cross-attending to the image tokens, 128 text tokens) (items/s);
* the embedders also run the **full pipeline**: ``--pipeline-images`` real photo files decoded and
  preprocessed by unirag's decode workers (:mod:`unirag.data.loader`, ``--decode-workers``, default
  auto) into pinned-memory batches, then the model - against the model alone on pre-made tensors;
* ``llava-1.5-7b-merged``: a LLaVA-1.5-7B-shaped VLM (CLIP ViT-L/14-336 + Llama-2-7B) captioning with
  k = 0, 1, 5 retrieved examples merged into one image (UniRAG's merged mode: one image, the k
  captions in the prompt), ``--new-tokens`` new tokens per caption (captions/s);
* ``interleaved-7b``: an interleaved multi-image VLM of similar size (LLaVA-OneVision-7B shape:
  SigLIP-so400m/14 at 384² + Qwen2-7B), each example its own image (k + 1 images) (captions/s);
* ``sd15-512``: a diffusers Stable Diffusion pipeline of SD-1.5 size (UNet 860M, VAE, CLIP-L text
  encoder) at 512², 25 steps, classifier-free guidance 7.5 (s/image).

Writes ``--out`` (JSON: one record per measurement plus the machine) and prints a table.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PHOTOS = REPO / "tests" / "fixtures" / "coco-mini" / "images"
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


# -- the architectures ------------------------------------------------------------------------------
def clip_vision(size: int, tiny: bool) -> dict[str, Any]:
    if tiny:
        return dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                    patch_size=8, image_size=32 if size == 224 else 48)
    return dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16,
                patch_size=14, image_size=size)


def clip_text(tiny: bool) -> dict[str, Any]:
    if tiny:
        return dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                    vocab_size=1000, max_position_embeddings=77, bos_token_id=0, eos_token_id=1, pad_token_id=1)
    return dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                vocab_size=49408, max_position_embeddings=77)


def blip_configs(tiny: bool):
    from transformers import BlipTextConfig, BlipVisionConfig

    if tiny:
        v = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, image_size=32,
                 patch_size=8)
        t = dict(vocab_size=1000, hidden_size=32, encoder_hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                 num_attention_heads=2, max_position_embeddings=128, bos_token_id=2, pad_token_id=0, sep_token_id=3)
    else:  # BLIP ViT-L/16 at 384 + BERT-base with cross-attention (UniIR BLIP-FF large)
        v = dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16,
                 image_size=384, patch_size=16)
        t = dict(vocab_size=30524, hidden_size=768, encoder_hidden_size=1024, intermediate_size=3072,
                 num_hidden_layers=12, num_attention_heads=12, max_position_embeddings=512)
    return (BlipVisionConfig(layer_norm_eps=1e-6, hidden_act="gelu", **v),
            BlipTextConfig(hidden_act="gelu", layer_norm_eps=1e-12, is_decoder=True, **t))


def llava_config(kind: str, tiny: bool):
    """LLaVA-1.5-7B (CLIP-L/14-336 + Llama-2-7B) or LLaVA-OneVision-7B (SigLIP-so400m + Qwen2-7B) shape."""
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, Qwen2Config, SiglipVisionConfig

    if kind == "merged":
        vision = CLIPVisionConfig(**clip_vision(336, tiny), projection_dim=768)
        text = LlamaConfig(**(dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=4, vocab_size=1100) if tiny else
                              dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                                   num_attention_heads=32, num_key_value_heads=32, vocab_size=32064)),
                           max_position_embeddings=4096)
        return LlavaConfig(vision_config=vision, text_config=text, image_token_index=text.vocab_size - 64,
                           vision_feature_layer=-2, vision_feature_select_strategy="default",
                           projector_hidden_act="gelu")
    vision = SiglipVisionConfig(**(dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=2, image_size=28, patch_size=14) if tiny else
                                   dict(hidden_size=1152, intermediate_size=4304, num_hidden_layers=26,
                                        num_attention_heads=16, image_size=384, patch_size=14)))
    text = Qwen2Config(**(dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                               num_key_value_heads=2, vocab_size=1100) if tiny else
                          dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                               num_key_value_heads=4, vocab_size=152064)),
                       max_position_embeddings=32768)
    return LlavaConfig(vision_config=vision, text_config=text, image_token_index=text.vocab_size - 64,
                       vision_feature_layer=-1, vision_feature_select_strategy="full", projector_hidden_act="gelu")


# -- measuring ----------------------------------------------------------------------------------------
@dataclass
class Record:
    model: str
    dtype: str
    batch: int
    what: str  # "model" (pre-made tensors), "pipeline" (files -> decode workers -> model), "generate", ...
    value: float
    unit: str
    peak_gpu_mib: float | None
    extra: dict[str, Any] = field(default_factory=dict)


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        import torch

        self.torch = torch
        self.args = args
        self.device = args.device
        self.gpu = args.device.startswith("cuda")
        self.records: list[Record] = []

    def sync(self) -> None:
        if self.gpu:
            self.torch.cuda.synchronize()

    def reset_peak(self) -> None:
        if self.gpu:
            self.sync()
            self.torch.cuda.reset_peak_memory_stats()

    def peak(self) -> float | None:
        if not self.gpu:
            return None
        self.sync()
        return round(self.torch.cuda.max_memory_allocated() / 2**20, 1)

    def timed(self, fn, repeat: int) -> float:
        """Seconds per call: one warm-up call, then the mean of ``repeat`` calls."""
        fn()
        self.sync()
        start = time.perf_counter()
        for _ in range(repeat):
            fn()
        self.sync()
        return (time.perf_counter() - start) / repeat

    def ratio_to_model(self, model: str, dtype: str, batch: int, rate: float) -> float | None:
        """``rate`` over the model-alone rate at the same batch size (None when not measured)."""
        for r in self.records:
            if (r.model, r.dtype, r.batch, r.what) == (model, dtype, batch, "model"):
                return round(rate / r.value, 3)
        return None

    def add(self, *args: Any, **extra: Any) -> None:
        record = Record(*args, extra=extra)
        self.records.append(record)
        peak = "n/a" if record.peak_gpu_mib is None else f"{record.peak_gpu_mib:.0f}"
        more = " ".join(f"{k}={v}" for k, v in extra.items())
        print(f"{record.model:24s} {record.dtype:9s} batch {record.batch:4d} {record.what:9s} "
              f"{record.value:10.2f} {record.unit:12s} peak {peak:>7s} MiB {more}", flush=True)

    @contextlib.contextmanager
    def building(self, dtype):
        """Build modules directly on the device in ``dtype`` (random init there: no fp32 copy on the host)."""
        torch = self.torch
        previous = torch.get_default_dtype()
        torch.set_default_dtype(dtype)
        try:
            with torch.device(self.device):
                yield
        finally:
            torch.set_default_dtype(previous)

    def free(self) -> None:
        import gc

        gc.collect()
        if self.gpu:
            self.torch.cuda.empty_cache()


def photo_files(n: int, coco: Path | None) -> list[str]:
    files = sorted(PHOTOS.glob("*.jpg"))
    if coco is not None and (coco / "images").is_dir():
        files += sorted((coco / "images").glob("*.jpg"))
    return [str(files[i % len(files)]) for i in range(n)]


def pipeline_rate(bench: Bench, forward, preprocess, batch: int, dtype) -> tuple[float, int]:
    """Items/s of files -> unirag decode workers (decode + preprocess) -> pinned batch -> ``forward``."""

    from unirag.data.loader import ImageLoader
    from unirag.encoders.base import stack_rows
    from unirag.runs.engine import EngineOptions
    from unirag.runtime import decode_processes, host_to_device

    workers = decode_processes(EngineOptions(decode_workers=bench.args.decode_workers).decode_workers)
    files = photo_files(bench.args.pipeline_images, bench.args.coco)
    jobs = [(s, files[s : s + batch]) for s in range(0, len(files), batch)]
    loader = ImageLoader(workers, preprocess)
    bench.sync()
    start = time.perf_counter()  # the workers' start-up included (once per build)
    for _, items in loader.map(jobs):
        pixels = host_to_device(stack_rows([d.unwrap() for d in items]), bench.device, dtype)
        forward(pixels)
    bench.sync()
    return len(files) / (time.perf_counter() - start), workers


def hf_preprocessor(size: int, kind: str = "clip"):
    """The PIL/numpy image processor (what runs in the decode workers; not the torchvision one)."""
    import transformers

    from unirag.encoders.hf_clip import HFProcessorTransform

    if kind == "blip":
        cls = getattr(transformers, "BlipImageProcessorPil", None) or transformers.BlipImageProcessor
        return HFProcessorTransform(cls(size={"height": size, "width": size}, resample=3,
                                        image_mean=list(CLIP_MEAN), image_std=list(CLIP_STD))).single
    cls = getattr(transformers, "CLIPImageProcessorPil", None) or transformers.CLIPImageProcessor
    return HFProcessorTransform(cls(size={"shortest_edge": size}, crop_size={"height": size, "width": size},
                                    resample=3, image_mean=list(CLIP_MEAN), image_std=list(CLIP_STD))).single


def features(out):
    """Projected embeddings from ``get_*_features`` (a tensor in transformers 4, an output object in 5)."""
    for attr in ("pooler_output", "image_embeds", "text_embeds"):
        value = getattr(out, attr, None)
        if value is not None:
            return value
    return out


# -- the benchmarks -----------------------------------------------------------------------------------
def bench_clip(bench: Bench, dtype_name: str, dtype) -> None:
    from transformers import CLIPConfig, CLIPModel

    torch, tiny = bench.torch, bench.args.tiny
    for size in (224, 336):
        name = f"clip-l14-{size}"
        cfg = CLIPConfig(text_config=clip_text(tiny), vision_config=clip_vision(size, tiny),
                         projection_dim=16 if tiny else 768)
        with bench.building(dtype):
            model = CLIPModel(cfg).eval()
        px = cfg.vision_config.image_size
        for batch in bench.args.embed_batches:
            pixels = torch.randn(batch, 3, px, px, device=bench.device, dtype=dtype)
            bench.reset_peak()
            with torch.inference_mode():
                sec = bench.timed(lambda p=pixels, m=model: features(m.get_image_features(pixel_values=p)),
                                  bench.args.repeat)
            bench.add(name, dtype_name, batch, "model", batch / sec, "images/s", bench.peak())
        batch = bench.args.pipeline_batch
        with torch.inference_mode():
            rate, workers = pipeline_rate(bench, lambda p, m=model: features(m.get_image_features(pixel_values=p)),
                                          hf_preprocessor(px), batch, dtype)
        bench.add(name, dtype_name, batch, "pipeline", rate, "images/s", bench.peak(), decode_workers=workers,
                  vs_model=bench.ratio_to_model(name, dtype_name, batch, rate))
        if size == 224:  # UniIR CLIP-SF large: the same towers on image+text candidates, score-level sum
            tokens = 77
            for batch in bench.args.embed_batches:
                pixels = torch.randn(batch, 3, px, px, device=bench.device, dtype=dtype)
                ids = torch.randint(0, cfg.text_config.vocab_size, (batch, tokens), device=bench.device)

                def fused(p=pixels, i=ids, m=model):
                    img = features(m.get_image_features(pixel_values=p))
                    txt = features(m.get_text_features(input_ids=i))
                    return torch.nn.functional.normalize(img + txt, dim=-1)

                bench.reset_peak()
                with torch.inference_mode():
                    sec = bench.timed(fused, bench.args.repeat)
                bench.add("uniir-clip-sf-large", dtype_name, batch, "model", batch / sec, "items/s", bench.peak())
        model = None  # noqa: F841 - free it before the next size
        bench.free()


def bench_blip(bench: Bench, dtype_name: str, dtype) -> None:
    from transformers import BlipTextModel, BlipVisionModel

    torch = bench.torch
    vcfg, tcfg = blip_configs(bench.args.tiny)
    with bench.building(dtype):
        vision, text = BlipVisionModel(vcfg).eval(), BlipTextModel(tcfg, add_pooling_layer=True).eval()
    tokens = 128 if not bench.args.tiny else 32

    def forward(pixels, ids=None):
        ids = ids if ids is not None else torch.randint(0, tcfg.vocab_size, (len(pixels), tokens), device=bench.device)
        image_embeds = vision(pixel_values=pixels).last_hidden_state
        atts = torch.ones(image_embeds.shape[:-1], dtype=torch.long, device=bench.device)
        return text(input_ids=ids, attention_mask=torch.ones_like(ids), encoder_hidden_states=image_embeds,
                    encoder_attention_mask=atts).pooler_output

    px = vcfg.image_size
    for batch in bench.args.embed_batches:
        pixels = torch.randn(batch, 3, px, px, device=bench.device, dtype=dtype)
        ids = torch.randint(0, tcfg.vocab_size, (batch, tokens), device=bench.device)
        bench.reset_peak()
        with torch.inference_mode():
            sec = bench.timed(lambda p=pixels, i=ids: forward(p, i), bench.args.repeat)
        bench.add("uniir-blip-ff-large", dtype_name, batch, "model", batch / sec, "items/s", bench.peak())
    batch = bench.args.pipeline_batch
    with torch.inference_mode():
        rate, workers = pipeline_rate(bench, forward, hf_preprocessor(px, "blip"), batch, dtype)
    bench.add("uniir-blip-ff-large", dtype_name, batch, "pipeline", rate, "items/s", bench.peak(),
              decode_workers=workers, vs_model=bench.ratio_to_model("uniir-blip-ff-large", dtype_name, batch, rate))
    bench.free()


def bench_vlm(bench: Bench, dtype_name: str, dtype, kind: str) -> None:
    from transformers import LlavaForConditionalGeneration

    torch, args = bench.torch, bench.args
    cfg = llava_config(kind, args.tiny)
    with bench.building(dtype):
        model = LlavaForConditionalGeneration(cfg).eval()
    vc = cfg.vision_config
    grid = vc.image_size // vc.patch_size
    image_tokens = grid * grid  # CLIP "default" drops CLS; SigLIP has none
    name = "llava-1.5-7b-merged" if kind == "merged" else "interleaved-7b"
    caption_tokens, instruction_tokens = 16, 40  # one retrieved caption in the prompt; the instruction
    new = args.new_tokens
    for k in (0, 1, 5):
        images = 1 if kind == "merged" else k + 1
        for batch in args.vlm_batches:
            text_len = instruction_tokens + k * caption_tokens
            seq = []
            for _ in range(images):
                seq += [cfg.image_token_index] * image_tokens + [5] * 4  # image block + "Caption: ..." glue
            ids = torch.randint(10, cfg.image_token_index - 1, (batch, text_len), device=bench.device)
            ids = torch.cat([torch.tensor(seq, device=bench.device).expand(batch, -1), ids], dim=1)
            pixels = torch.randn(batch * images, 3, vc.image_size, vc.image_size, device=bench.device, dtype=dtype)

            def generate(i=ids, p=pixels):
                return model.generate(input_ids=i, attention_mask=torch.ones_like(i), pixel_values=p,
                                      max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0)

            bench.reset_peak()
            with torch.inference_mode():
                sec = bench.timed(generate, max(1, args.repeat // 4))
            bench.add(name, dtype_name, batch, f"k={k}", batch / sec, "captions/s", bench.peak(),
                      images=images, prompt_tokens=int(ids.shape[1]), new_tokens=new)
    bench.free()


def bench_sd(bench: Bench, dtype_name: str, dtype) -> None:
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    torch, args = bench.torch, bench.args
    if args.tiny:
        unet_cfg = dict(sample_size=8, block_out_channels=(32, 64), layers_per_block=1, cross_attention_dim=32,
                        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), attention_head_dim=4,
                        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), norm_num_groups=8)
        vae_cfg = dict(block_out_channels=(32, 64), down_block_types=("DownEncoderBlock2D",) * 2,
                       up_block_types=("UpDecoderBlock2D",) * 2, latent_channels=4, norm_num_groups=8)
        text_cfg = CLIPTextConfig(**clip_text(True))
        size, steps = 16, 2
    else:  # SD-1.5: UNet 860M, the SD VAE, CLIP ViT-L/14 text encoder (123M)
        unet_cfg = dict(sample_size=64, block_out_channels=(320, 640, 1280, 1280), layers_per_block=2,
                        cross_attention_dim=768, attention_head_dim=8,
                        down_block_types=("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
                        up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3)
        vae_cfg = dict(block_out_channels=(128, 256, 512, 512), down_block_types=("DownEncoderBlock2D",) * 4,
                       up_block_types=("UpDecoderBlock2D",) * 4, latent_channels=4, layers_per_block=2,
                       sample_size=512)
        text_cfg = CLIPTextConfig(**clip_text(False))
        size, steps = 512, 25
    with bench.building(dtype):
        unet, vae, text = UNet2DConditionModel(**unet_cfg), AutoencoderKL(**vae_cfg), CLIPTextModel(text_cfg)
    scheduler = DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", clip_sample=False,
                              set_alpha_to_one=False, steps_offset=1)
    pipe = StableDiffusionPipeline(vae=vae, text_encoder=text, tokenizer=None, unet=unet, scheduler=scheduler,
                                   safety_checker=None, feature_extractor=None, requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    for batch in args.sd_batches:
        ids = torch.randint(0, text_cfg.vocab_size, (batch, 77), device=bench.device)
        with torch.inference_mode():
            embeds = text(input_ids=ids)[0]
            negative = text(input_ids=torch.zeros_like(ids))[0]

        def run(e=embeds, n=negative):
            return pipe(prompt_embeds=e, negative_prompt_embeds=n, height=size, width=size, num_inference_steps=steps,
                        guidance_scale=7.5, output_type="np")

        bench.reset_peak()
        with torch.inference_mode():
            sec = bench.timed(run, 1)
        bench.add("sd15-512" if not args.tiny else "sd15-tiny", dtype_name, batch, f"{steps} steps", sec / batch,
                  "s/image", bench.peak(), size=size)
    bench.free()


BENCHES = {"clip": bench_clip, "blip": bench_blip,
           "llava": lambda b, n, d: bench_vlm(b, n, d, "merged"),
           "interleaved": lambda b, n, d: bench_vlm(b, n, d, "interleaved"), "sd": bench_sd}


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (cpu: use with --tiny)")
    ap.add_argument("--tiny", action="store_true", help="tiny configs: a dry run of every code path")
    ap.add_argument("--dtypes", default=None, help="comma list (default: bfloat16,float16 on CUDA; bfloat16 on CPU)")
    ap.add_argument("--only", default=",".join(BENCHES), help=f"comma list of {', '.join(BENCHES)}")
    ap.add_argument("--embed-batches", type=ints, default=None, help="embedder batch sizes (default 32,256,512)")
    ap.add_argument("--vlm-batches", type=ints, default=None, help="VLM batch sizes (default 1,8)")
    ap.add_argument("--sd-batches", type=ints, default=None, help="diffusion batch sizes (default 1,4)")
    ap.add_argument("--pipeline-batch", type=int, default=None, help="batch of the decode-workers pipeline (256)")
    ap.add_argument("--pipeline-images", type=int, default=None, help="photo files per pipeline run (2048)")
    ap.add_argument("--decode-workers", default="auto")
    ap.add_argument("--coco", type=Path, default=REPO.parent / "shared" / "data" / "coco-val2017-mini",
                    help="more photos for the pipeline, when the folder exists")
    ap.add_argument("--new-tokens", type=int, default=None, help="tokens generated per caption (32)")
    ap.add_argument("--repeat", type=int, default=None, help="timed calls per embedder measurement (10)")
    ap.add_argument("--out", type=Path, default=Path("bench_gpu.json"))
    args = ap.parse_args(argv)
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device: run with --device cpu --tiny for the dry mode", file=sys.stderr)
        return 2
    tiny = args.tiny
    args.embed_batches = args.embed_batches or ([4] if tiny else [32, 256, 512])
    args.vlm_batches = args.vlm_batches or ([2] if tiny else [1, 8])
    args.sd_batches = args.sd_batches or ([1] if tiny else [1, 4])
    args.pipeline_batch = args.pipeline_batch or (4 if tiny else 256)
    args.pipeline_images = args.pipeline_images or (8 if tiny else 2048)
    args.new_tokens = args.new_tokens or (4 if tiny else 32)
    args.repeat = args.repeat or (1 if tiny else 10)
    gpu = args.device.startswith("cuda")
    dtypes = (args.dtypes or ("bfloat16,float16" if gpu else "bfloat16")).split(",")
    bench = Bench(args)
    started = time.perf_counter()
    print(f"{'model':24s} {'dtype':9s} {'batch':>10s} {'what':9s} {'throughput':>10s} {'unit':12s} {'peak GPU':>12s}")
    for dtype_name in dtypes:
        dtype = getattr(torch, dtype_name)
        for key in args.only.split(","):
            BENCHES[key](bench, dtype_name, dtype)
            bench.free()  # the model is gone with the function's frame: return its memory
    machine = {"device": torch.cuda.get_device_name(args.device) if gpu else platform.processor() or "cpu",
               "torch": torch.__version__, "python": platform.python_version(), "tiny": tiny,
               "seconds": round(time.perf_counter() - started, 1)}
    args.out.write_text(json.dumps({"machine": machine, "records": [asdict(r) for r in bench.records]}, indent=1))
    print(f"\n{len(bench.records)} measurements in {machine['seconds']} s on {machine['device']} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
