"""``unirag caption``: caption image queries zero-shot, with random or retrieved examples."""

from __future__ import annotations

import json

import click

from unirag.cli.options import (
    behaviour_options,
    engine_options,
    generation_options,
    run_kwargs,
)
from unirag.pipelines.examples import MODES


@click.command("caption")
@click.option("--queries", required=True, type=click.Path(dir_okay=False), help="M-BEIR queries JSONL (image queries).")
@click.option("--images-root", type=click.Path(file_okay=False), default=None,
              help="Folder the queries' image paths are relative to.")
@click.option("--generator", default="retrieval:consensus", show_default=True,
              help="openai:MODEL, gemini:MODEL, hf:HUB_ID_OR_DIR, retrieval:top1 or retrieval:consensus.")
@click.option("--mode", type=click.Choice(MODES), default="rag", show_default=True)
@click.option("--k", type=int, default=None,
              help="Number of examples (default: 0 zero-shot, 5 for retrieval:consensus, else 1).")
@click.option("--official-prompts", type=click.Path(file_okay=False), default=None,
              help="Your checkout of github.com/castorini/UniRAG: with --set caption_prompts=official (or --profile "
                   "official) the caption instructions are read from its src/unirag/prompts/ files.")
@generation_options
@behaviour_options()
@engine_options("caption")
def caption(settings, selection, engine, **opts) -> None:
    """Caption image queries; rerun the same command to resume after a crash or Ctrl-C."""
    from unirag.pipelines.caption import CaptionConfig, run_captioning
    from unirag.runs.rundir import check_some_succeeded

    cfg = CaptionConfig(profile=settings, selection=selection, engine=engine, **run_kwargs(opts))
    summary = run_captioning(cfg)
    counts, totals = summary["counts"], summary["totals"]
    cost = totals.get("cost_usd")
    click.echo(f"{counts['ok']}/{counts['queries']} captioned, {counts['error']} failed"
               + (f", cost ${cost:.4f}" if cost else "") + f" -> {cfg.out}/outputs.jsonl"
               + (f"; {counts['short']} quer(ies) with fewer than {summary['k']} examples" if counts.get("short") else ""))
    click.echo(json.dumps(summary["this_run"]), err=True)
    check_some_succeeded(cfg.out, summary["this_run"]["ok"], summary["this_run"]["error"])
    if counts["error"]:
        click.echo("failed queries are recorded with their error; rerun the same command to retry them", err=True)
