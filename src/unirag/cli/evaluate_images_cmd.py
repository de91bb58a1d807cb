"""``unirag evaluate images``: FID, CLIP Score and Inception Score of an image run (torchmetrics)."""

from __future__ import annotations

from pathlib import Path

import click

from unirag.cli.evaluate_cmd import bootstrap_options
from unirag.cli.options import behaviour_options, decode_option
from unirag.metrics.images import DEFAULT_CLIP_MODEL


@click.command("images")
@click.option("--run", "run_dir", required=True, type=click.Path(path_type=Path),
              help="Image run directory (outputs.jsonl, manifest.json, generated PNGs).")
@click.option("--queries", required=True, type=click.Path(path_type=Path), help="M-BEIR queries JSONL (captions).")
@click.option("--pool", required=True, type=click.Path(path_type=Path), help="Pool JSONL holding the real images.")
@click.option("--images-root", required=True, type=click.Path(path_type=Path),
              help="Directory the pool's img_path values are relative to.")
@click.option("--qrels", type=click.Path(path_type=Path), default=None,
              help="Qrels file; default: the queries' pos_cand_list.")
@click.option("--inception-weights", type=click.Path(path_type=Path), default=None,
              help="torch-fidelity Inception weights file (default: the torch hub cache).")
@click.option("--clip-model", default=DEFAULT_CLIP_MODEL, show_default=True,
              help="CLIP checkpoint directory or a Hugging Face id already in the local cache.")
@click.option("--no-clip", is_flag=True, help="Skip CLIP Score.")
@click.option("--is-splits", default=10, show_default=True, help="Inception Score splits.")
@click.option("--seed", default=0, show_default=True, help="Seed of the Inception Score split.")
@click.option("--batch-size", default=32, show_default=True)
@click.option("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda when available).")
@decode_option("metric")
@bootstrap_options
@behaviour_options(selection=False)
def images(run_dir: Path, queries: Path, pool: Path, images_root: Path, qrels: Path | None,
           inception_weights: Path | None, clip_model: str, no_clip: bool, is_splits: int, seed: int,
           batch_size: int, device: str | None, decode, resamples: int, bootstrap_seed: int,
           ci_method: str, settings=None) -> None:
    """FID (vs the queries' real images), CLIP Score (vs the query captions), IS (mean, SD).

    FID/IS need the optional extra unirag[image-metrics]; without it they are skipped with one
    line and CLIP Score still runs. Writes metrics.json in the run directory.
    """
    from unirag.metrics.image_run import evaluate_image_run
    from unirag.reports.console import metric_table, summary_lines

    result = evaluate_image_run(run_dir, queries, pool, images_root, qrels=qrels,
                                inception_weights=inception_weights, clip_model=None if no_clip else clip_model,
                                is_splits=is_splits, seed=seed, batch_size=batch_size, device=device,
                                show_progress=True, engine=decode, resamples=resamples,
                                bootstrap_seed=bootstrap_seed, ci_method=ci_method, profile=settings)
    click.echo(metric_table(result["metrics"], result["skipped_metrics"], result.get("intervals")))
    for line in summary_lines(result):
        click.echo(line)
    click.echo(f"wrote {Path(run_dir) / 'metrics.json'}")
