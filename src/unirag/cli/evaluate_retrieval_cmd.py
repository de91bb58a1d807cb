"""``unirag evaluate retrieval``: hit@k, recall@k and MRR@k of a run against qrels."""

from __future__ import annotations

from pathlib import Path

import click

from unirag.cli.evaluate_cmd import bootstrap_options


def format_table(metrics: dict, ks: list[int], intervals: dict | None = None) -> str:
    uniir = all(f"uniir_recall@{k}" in metrics for k in ks)
    lines = [f"{'k':>4}  {'hit@k':>7}  {'recall@k':>8}  {'MRR@k':>7}" + (f"  {'UniIR R@k':>9}" if uniir else "")]
    for k in ks:
        lines.append(f"{k:>4}  {metrics[f'hit@{k}']:>7.4f}  {metrics[f'recall@{k}']:>8.4f}  {metrics[f'mrr@{k}']:>7.4f}"
                     + (f"  {metrics[f'uniir_recall@{k}']:>9.4f}" if uniir else ""))
    lines.append("hit@k, recall@k, MRR@k: the ranked list after complement replacement (paper §5)"
                 + ("; UniIR R@k: UniIR's Recall@k on the raw top-k ids (compute_recall_at_k)" if uniir else
                    "; UniIR's Recall@k needs a run file with raw ids (retrieve again with this unirag)"))
    if intervals and intervals.get("intervals"):
        cis = intervals["intervals"]

        def ci(name: str) -> str:
            return f"[{cis[name]['low']:.4f}, {cis[name]['high']:.4f}]" if name in cis else "-"
        lines.append("95% CI " + ("(hit@k, recall@k, MRR@k" + (", UniIR R@k)" if uniir else ")")))
        for k in ks:
            names = ["hit", "recall", "mrr"] + (["uniir_recall"] if uniir else [])
            lines.append(f"{k:>4}  " + "  ".join(ci(f"{n}@{k}") for n in names))
        b = intervals["bootstrap"]
        lines.append(f"95% CI: {b['method']} bootstrap over the judged queries, {b['n_resamples']} resamples, "
                     f"seed {b['seed']}")
    lines.append(f"queries: {metrics['num_queries']} judged, {metrics['missing_queries']} missing from the run"
                 " (scored 0)")
    return "\n".join(lines)


@click.command("retrieval")
@click.option("--run", "run_path", required=True, type=click.Path(path_type=Path), help="Run JSONL from retrieve.")
@click.option("--qrels", "qrels_path", required=True, type=click.Path(path_type=Path), help="Qrels file.")
@click.option("--k", "ks", default="1,5,10", show_default=True, help="Cutoffs, comma-separated.")
@click.option("--out", "out", type=click.Path(path_type=Path), default=None,
              help="Metrics JSON (default: beside the run, <run>.metrics.json).")
@bootstrap_options
def retrieval(run_path: Path, qrels_path: Path, ks: str, out: Path | None, resamples: int, bootstrap_seed: int,
              ci_method: str) -> None:
    """Score a retrieval run: hit@k after complement replacement, true recall@k, MRR@k and UniIR's Recall@k."""
    from unirag.errors import ConfigError
    from unirag.metrics.retrieval import evaluate_run_file

    try:
        cutoffs = sorted({int(x) for x in ks.split(",") if x.strip()})
    except ValueError:
        cutoffs = []
    if not cutoffs or cutoffs[0] <= 0:
        raise ConfigError(f"--k expects comma-separated positive integers, got {ks!r}")
    metrics, written, depth, intervals = evaluate_run_file(run_path, qrels_path, cutoffs, out, resamples=resamples,
                                                           bootstrap_seed=bootstrap_seed, ci_method=ci_method)
    click.echo(format_table(metrics, cutoffs, intervals))
    if depth < max(cutoffs):
        click.echo(f"note: the run has at most {depth} candidates per query, so cutoffs above {depth} "
                   f"equal @{depth}; retrieve with --k {max(cutoffs)} to score them")
    click.echo(f"metrics written to {written}")
