"""``unirag evaluate retrieval``: hit@k, recall@k and MRR@k of a run against qrels."""

from __future__ import annotations

from pathlib import Path

import click


def parse_ks(value: str) -> list[int]:
    from unirag.errors import ConfigError

    try:
        ks = [int(x) for x in value.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--k expects comma-separated positive integers, got {value!r}") from None
    if not ks or any(k <= 0 for k in ks):
        raise ConfigError(f"--k expects comma-separated positive integers, got {value!r}")
    return sorted(set(ks))


def format_table(metrics: dict, ks: list[int]) -> str:
    lines = [f"{'k':>4}  {'hit@k':>7}  {'recall@k':>8}  {'MRR@k':>7}"]
    for k in ks:
        lines.append(f"{k:>4}  {metrics[f'hit@{k}']:>7.4f}  {metrics[f'recall@{k}']:>8.4f}  {metrics[f'mrr@{k}']:>7.4f}")
    lines.append(f"queries: {metrics['num_queries']} judged, {metrics['missing_queries']} missing from the run"
                 " (scored 0)")
    return "\n".join(lines)


@click.command("retrieval")
@click.option("--run", "run_path", required=True, type=click.Path(path_type=Path), help="Run JSONL from retrieve.")
@click.option("--qrels", "qrels_path", required=True, type=click.Path(path_type=Path), help="Qrels file.")
@click.option("--k", "ks", default="1,5,10", show_default=True, help="Cutoffs, comma-separated.")
@click.option("--out", "out", type=click.Path(path_type=Path), default=None,
              help="Metrics JSON (default: beside the run, <run>.metrics.json).")
def retrieval(run_path: Path, qrels_path: Path, ks: str, out: Path | None) -> None:
    """Score a retrieval run: hit@k (UniIR's "recall"), true recall@k and MRR@k."""
    from unirag.data.mbeir import read_qrels
    from unirag.errors import InputError
    from unirag.metrics.retrieval import evaluate_run
    from unirag.retrieval.run_io import read_retrieval_run
    from unirag.runs.atomic import atomic_write_json

    cutoffs = parse_ks(ks)
    run = {qid: r.ranked_dids for qid, r in read_retrieval_run(run_path).items()}
    qrels = read_qrels(qrels_path)
    try:
        metrics = evaluate_run(run, qrels.relevant, cutoffs)
    except ValueError as e:
        raise InputError(str(e), path=qrels_path) from None
    click.echo(format_table(metrics, cutoffs))
    depth = max((len(r) for r in run.values()), default=0)
    if depth < max(cutoffs):
        click.echo(f"note: the run has at most {depth} candidates per query, so cutoffs above {depth} "
                   f"equal @{depth}; retrieve with --k {max(cutoffs)} to score them")
    out = out or run_path.with_name(run_path.stem + ".metrics.json")
    atomic_write_json(out, {"run": str(run_path), "qrels": str(qrels_path), "k": cutoffs, "metrics": metrics})
    click.echo(f"metrics written to {out}")
