"""``unirag evaluate retrieval|captions|images``: score the output of a stage against its references.

``retrieval``: hit@k, recall@k and MRR@k of a run against qrels; ``captions``: COCO caption metrics of a
caption run (see unirag.metrics.captions); ``images``: FID, CLIP Score and Inception Score of an image
run (torchmetrics)."""

from __future__ import annotations

from pathlib import Path

import click

from unirag.cli.options import behaviour_options, bootstrap_options, decode_option
from unirag.metrics.images import DEFAULT_CLIP_MODEL


@click.group("evaluate")
def evaluate_group() -> None:
    """Score the output of a stage against its references."""


def format_table(metrics: dict, ks: list[int], intervals: dict | None = None) -> str:
    uniir = all(f"uniir_recall@{k}" in metrics for k in ks)
    columns = {"hit": "hit@k", "recall": "recall@k", "mrr": "MRR@k", **({"uniir_recall": "UniIR R@k"} if uniir else {})}
    lines = [f"{'k':>4}" + "".join(f"  {title:>7}" for title in columns.values())]
    for k in ks:
        lines.append(f"{k:>4}" + "".join(f"  {metrics[f'{n}@{k}']:>{max(7, len(t))}.4f}" for n, t in columns.items()))
    lines.append("hit@k, recall@k, MRR@k: the ranked list after complement replacement (paper §5)"
                 + ("; UniIR R@k: UniIR's Recall@k on the raw top-k ids (compute_recall_at_k)" if uniir else
                    "; UniIR's Recall@k needs a run file with raw ids (retrieve again with this unirag)"))
    if intervals and intervals.get("intervals"):
        cis = intervals["intervals"]

        def ci(name: str) -> str:
            return f"[{cis[name]['low']:.4f}, {cis[name]['high']:.4f}]" if name in cis else "-"
        lines.append(f"95% CI ({', '.join(columns.values())})")
        for k in ks:
            lines.append(f"{k:>4}  " + "  ".join(ci(f"{n}@{k}") for n in columns))
        b = intervals["bootstrap"]
        lines.append(f"95% CI: {b['method']} bootstrap over the judged queries, {b['n_resamples']} resamples, "
                     f"seed {b['seed']}")
    lines.append(f"queries: {metrics['num_queries']} judged, {metrics['missing_queries']} missing from the run"
                 " (scored 0)")
    return "\n".join(lines)


@evaluate_group.command("retrieval", short_help="hit@k, recall@k, MRR@k of a retrieval run.")
@click.option("--run", "run_path", required=True, type=click.Path(path_type=Path), help="Run JSONL from retrieve.")
@click.option("--qrels", "qrels_path", required=True, type=click.Path(path_type=Path), help="Qrels file.")
@click.option("--k", "ks", default="1,5,10", show_default=True, help="Cutoffs, comma-separated.")
@click.option("--out", "out", type=click.Path(path_type=Path), default=None,
              help="Metrics JSON (default: beside the run, <run>.metrics.json).")
@bootstrap_options
def retrieval(ks: str, **opts) -> None:
    """Score a retrieval run: hit@k after complement replacement, true recall@k, MRR@k and UniIR's Recall@k."""
    from unirag.errors import ConfigError
    from unirag.metrics.retrieval import evaluate_run_file

    try:
        cutoffs = sorted({int(x) for x in ks.split(",") if x.strip()})
    except ValueError:
        cutoffs = []
    if not cutoffs or cutoffs[0] <= 0:
        raise ConfigError(f"--k expects comma-separated positive integers, got {ks!r}")
    metrics, written, depth, intervals = evaluate_run_file(**opts, ks=cutoffs)
    click.echo(format_table(metrics, cutoffs, intervals))
    if depth < max(cutoffs):
        click.echo(f"note: the run has at most {depth} candidates per query, so cutoffs above {depth} "
                   f"equal @{depth}; retrieve with --k {max(cutoffs)} to score them")
    click.echo(f"metrics written to {written}")


@evaluate_group.command("captions", short_help="BLEU, METEOR, ROUGE-L, CIDEr, SPICE of a caption run.")
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
def captions(run_dir: Path, no_meteor: bool, no_strip_prefixes: bool, settings, **opts) -> None:
    """BLEU-1..4, METEOR, ROUGE-L, CIDEr (and SPICE) ×100; writes metrics.json in the run directory.

    Answer prefixes such as 'Caption [3]:' and surrounding quotes are stripped first; failed
    queries are excluded and counted. Each metric gets a 95 % bootstrap interval over the queries.
    """
    from unirag.metrics.captions import evaluate_caption_run

    _show(run_dir, evaluate_caption_run(run_dir, **opts, strip_prefixes=not no_strip_prefixes,
                                        meteor=not no_meteor, profile=settings))


@evaluate_group.command("images", short_help="FID, CLIP Score, Inception Score of an image run.")
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
def images(run_dir: Path, clip_model: str, no_clip: bool, decode, settings, **opts) -> None:
    """FID (vs the queries' real images), CLIP Score (vs the query captions), IS (mean, SD).

    FID/IS need the optional extra unirag[image-metrics]; without it they are skipped with one
    line and CLIP Score still runs. Writes metrics.json in the run directory.
    """
    from unirag.metrics.image_run import evaluate_image_run

    _show(run_dir, evaluate_image_run(run_dir, **opts, clip_model=None if no_clip else clip_model,
                                      show_progress=True, engine=decode, profile=settings))


def _show(run_dir: Path, result: dict) -> None:
    """A caption or image run's scores, as ``evaluate captions`` and ``evaluate images`` print them."""
    from unirag.reports.console import metric_table, summary_lines

    click.echo("\n".join([metric_table(result["metrics"], result["skipped_metrics"], result.get("intervals")),
                          *summary_lines(result), f"wrote {Path(run_dir) / 'metrics.json'}"]))
