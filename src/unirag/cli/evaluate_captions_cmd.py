"""``unirag evaluate captions``: COCO caption metrics of a caption run (see unirag.metrics.captions)."""

from __future__ import annotations

from pathlib import Path

import click

from unirag.cli.evaluate_cmd import bootstrap_options
from unirag.cli.options import behaviour_options


@click.command("captions")
@click.option("--run", "run_dir", required=True, type=click.Path(path_type=Path),
              help="Caption run directory (outputs.jsonl, manifest.json).")
@click.option("--queries", required=True, type=click.Path(path_type=Path), help="M-BEIR queries JSONL of the run.")
@click.option("--pool", required=True, type=click.Path(path_type=Path),
              help="Candidate pool JSONL holding the reference captions.")
@click.option("--qrels", type=click.Path(path_type=Path), default=None,
              help="Qrels file; default: the queries' pos_cand_list.")
@click.option("--spice-lib", type=click.Path(path_type=Path), default=None, envvar="UNIRAG_SPICE_LIB",
              help="Directory with stanford-corenlp-3.6.0.jar and -models.jar for SPICE (env UNIRAG_SPICE_LIB).")
@click.option("--no-meteor", is_flag=True, help="Skip METEOR (slowest; not in the paper's tables).")
@click.option("--no-strip-prefixes", is_flag=True, help="Score captions as generated (keep 'Caption [3]:' etc.).")
@bootstrap_options
@behaviour_options(selection=False)
def captions(run_dir: Path, queries: Path, pool: Path, qrels: Path | None, spice_lib: Path | None,
             no_meteor: bool, no_strip_prefixes: bool, resamples: int, bootstrap_seed: int, ci_method: str,
             settings=None) -> None:
    """BLEU-1..4, METEOR, ROUGE-L, CIDEr (and SPICE) ×100; writes metrics.json in the run directory.

    Answer prefixes such as 'Caption [3]:' and surrounding quotes are stripped first; failed
    queries are excluded and counted. Each metric gets a 95 % bootstrap interval over the queries.
    """
    from unirag.metrics.captions import evaluate_caption_run
    from unirag.reports.console import metric_table, summary_lines

    result = evaluate_caption_run(run_dir, queries, pool, qrels, spice_lib=spice_lib,
                                  strip_prefixes=not no_strip_prefixes, meteor=not no_meteor, resamples=resamples,
                                  bootstrap_seed=bootstrap_seed, ci_method=ci_method, profile=settings)
    click.echo(metric_table(result["metrics"], result["skipped_metrics"], result.get("intervals")))
    for line in summary_lines(result):
        click.echo(line)
    click.echo(f"wrote {Path(run_dir) / 'metrics.json'}")
