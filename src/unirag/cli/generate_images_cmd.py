"""``unirag generate-images``: one image per caption query, zero-shot or with example pairs in context."""

from __future__ import annotations

import click

from unirag.cli.options import behaviour_options, engine_options, run_kwargs, run_options
from unirag.generators.images.base import (
    DEFAULT_GUIDANCE,
    DEFAULT_HEIGHT,
    DEFAULT_STEPS,
    DEFAULT_WIDTH,
)
from unirag.pipelines.examples import MODES


@click.command("generate-images")
@click.option("--queries", required=True, type=click.Path(dir_okay=False),
              help="M-BEIR queries JSONL; each query's caption (query_txt) is the text to draw.")
@click.option("--generator", required=True,
              help="diffusers:<hub id or dir> | openai-image:gpt-image-1 | gemini-image:<model> | retrieval:top1")
@click.option("--mode", type=click.Choice(MODES), default="zero-shot", show_default=True,
              help="No examples, k random gold pairs of other queries, or the top-k retrieved pairs.")
@click.option("--k", type=int, default=None, help="Examples per query (default: 0 zero-shot, else 1).")
@click.option("--width", type=int, default=DEFAULT_WIDTH, show_default=True)
@click.option("--height", type=int, default=DEFAULT_HEIGHT, show_default=True)
@click.option("--steps", type=int, default=None,
              help=f"Denoising steps (local models). Default {DEFAULT_STEPS}; Emu2-Gen under --set emu2_sampling=official: 50.")
@click.option("--guidance", type=float, default=None,
              help=f"Classifier-free guidance scale (local models). Default {DEFAULT_GUIDANCE}; Emu2-Gen under "
                   "--set emu2_sampling=official: 3.0.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed for random example selection, as on every command (the picture's seed is the setting "
                   "image_seed: --set image_seed=N, default 1234).")
@click.option("--quality", default=None, help="openai-image: low | medium | high | auto.")
@click.option("--offload", type=click.Choice(["none", "model", "sequential"]), default=None,
              help="diffusers, emu2-gen: keep sub-models on the CPU and move each to the GPU only while it runs.")
@click.option("--lavit-code", type=click.Path(file_okay=False), default=None,
              help="lavit: folder of a github.com/jy0205/LaVIT checkout (its models package is imported).")
@run_options
@behaviour_options()
@engine_options("image")
def generate_images(width, height, steps, guidance, settings, selection, engine, **opts) -> None:
    """Generate an image for every caption query, saved as PNG next to the prompt that made it.

    \b
    Example (offline baseline, the top-1 retrieved image):
      unirag generate-images --queries q.jsonl --pool-images-root data \\
        --generator retrieval:top1 --mode rag --k 1 --retrieval run.jsonl --out runs/top1
    """
    from unirag.pipelines.image_gen import ImageConfig, run_images
    from unirag.runs.rundir import check_some_succeeded

    cfg = run_kwargs(opts)
    counts = run_images(ImageConfig(width=width, height=height, steps=steps, guidance=guidance, profile=settings,
                                    selection=selection, engine=engine, **cfg))
    click.echo(f"{cfg['out']}: {counts['total_ok']}/{counts['total_queries']} images ok, "
               f"{counts['total_error']} failed (this run: {counts['ok']} new, {counts['error']} failed, "
               f"{counts['skipped']} already done)"
               + (f"; {counts['total_short']} quer(ies) with fewer examples than asked" if counts.get("total_short") else ""))
    check_some_succeeded(cfg["out"], counts["ok"], counts["error"])
    if counts["total_error"]:
        click.echo("failed queries are recorded in outputs.jsonl (status error); rerun the same command to retry them",
                   err=True)
