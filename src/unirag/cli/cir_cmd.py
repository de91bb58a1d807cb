"""``unirag cir``: composed image retrieval (X^R agents and the embedding baseline) on a benchmark."""

from __future__ import annotations

import click

from unirag.cir.datasets import DATASETS
from unirag.cli.options import (
    behaviour_options,
    bootstrap_options,
    device_options,
    engine_options,
)

CIR_PROFILE_HELP = ("Named set of behaviour settings: default (the paper) or official (the official X^R code); the "
                    "agents YAML's profile when omitted; --set overrides single settings (the xr_* rows of "
                    "docs/xr-parity.md).")


def _print_metrics(name: str, metrics: dict) -> None:
    rows = [(stage, m) for stage, m in metrics.items() if isinstance(m, dict) and "n_queries" in m]
    for stage, m in rows:
        vals = "  ".join(f"{k} {v:.2f}" for k, v in m.items() if isinstance(v, float))
        click.echo(f"{name} {stage:<10} n={m['n_queries']:<5} {vals or m.get('note', '')}")
        if m.get("intervals"):
            click.echo(f"{'':<{len(name)}} {'95% CI':<10} {'':<7} " + "  ".join(
                f"{k} [{c['low']:.2f}, {c['high']:.2f}]" for k, c in m["intervals"].items()))


@click.command("cir")
@click.option("--dataset", type=click.Choice(DATASETS), required=True, help="Benchmark format of the annotations.")
@click.option("--annotations", "annotations", multiple=True, required=True, type=click.Path(dir_okay=False),
              help="Annotation file (repeat for FashionIQ's three categories: their average is reported).")
@click.option("--images-root", type=click.Path(file_okay=False), required=True,
              help="Folder the queries' (reference) and the pool's image paths are relative to.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True, help="Run directory.")
@click.option("--split-file", type=click.Path(dir_okay=False), default=None,
              help="Candidate list: FashionIQ/CIRR image split (inferred when omitted), CIRCO COCO image "
                   "info, M-BEIR pool JSONL.")
@click.option("--agents", type=click.Path(dir_okay=False), default=None,
              help="YAML: agent role -> model (see examples/xr_agents.yaml). Without it: embedding baseline.")
@click.option("--k-prime", type=int, default=None, help="Candidates kept by coarse filtering (k').")
@click.option("--lambda", "lam", type=float, default=None, help="Weight of S^t in the re-ranking (0..1).")
@click.option("--k", type=int, default=None, help="Results written per query (default 50).")
@click.option("--stages", default="baseline,coarse,fine", show_default=True,
              help="Rankings to produce.")
@click.option("--limit", type=int, default=None, help="Only the first N queries of each file.")
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None,
              help="Agent-call and embedding cache (default OUT/cache); share it across runs.")
@click.option("--encoder", default=None, help="Cross-modal encoder spec (default: offline encoder).")
@click.option("--concurrency", type=int, default=None, help="Concurrent agent calls for API backends.")
@click.option("--no-imagination", is_flag=True, help="Ablation: coarse ranking from the fused reference embedding.")
@click.option("--fine-only", is_flag=True, help="Ablation: question scores alone on the baseline top-k'.")
@click.option("--modalities", type=click.Choice(("both", "text", "vision")), default="both",
              show_default=True, help="Ablation: candidate-side agents on captions, images or both.")
@click.option("--exclude-reference/--keep-reference", default=None,
              help="Remove the reference image from the gallery (default: as the benchmark does; CIRR only).")
@click.option("--quiet", is_flag=True, help="No progress bars.")
@bootstrap_options
@device_options
@click.option("--official-prompts", type=click.Path(file_okay=False), default=None,
              help="Your checkout of the official X^R code (01yzzyu/xr.github.io), or one dataset's "
                   "XR/prompts/<dataset> folder: read under --set xr_prompts=official.")
@behaviour_options(selection=False, raw=True, profile_help=CIR_PROFILE_HELP)
@engine_options("agent")
def cir(annotations, no_imagination, fine_only, modalities, quiet, device, dtype, setting_overrides, resamples,
        bootstrap_seed, ci_method, engine, **opts) -> None:
    """Rank a CIR benchmark's pool for each (reference image, modification text) query.

    Writes OUT/rankings.jsonl (per query: ranked image ids of every stage, stage scores),
    OUT/metrics.json (baseline, X^R without fine filtering, X^R), submission files for the CIRR and
    CIRCO test servers, and caches every agent call: rerun the same command to resume.
    """
    from pathlib import Path

    from unirag.cir.api import run_cir
    from unirag.cir.pipeline import Ablation
    from unirag.errors import RunFailedError
    from unirag.runs.rundir import read_run_manifest

    metrics = run_cir(annotations=list(annotations), **opts, progress=not quiet, engine=engine,
                      ablation=Ablation(imagination=not no_imagination, fine_only=fine_only, modalities=modalities),
                      encoder_options={"device": device, "dtype": dtype},
                      overrides=setting_overrides, echo=lambda s: click.echo(s, err=True),
                      bootstrap={"resamples": resamples, "bootstrap_seed": bootstrap_seed, "method": ci_method})
    out_dir = opts["out_dir"]
    if "datasets" in metrics:
        for name, m in metrics["datasets"].items():
            _print_metrics(name, m)
        _print_metrics("average", metrics.get("average", {}) and
                       {st: {"n_queries": len(metrics["datasets"]), **v} for st, v in metrics["average"].items()})
    else:
        _print_metrics(metrics.get("dataset", ""), metrics)
    click.echo(f"wrote {out_dir}/rankings.jsonl and metrics.json", err=True)
    # Exit 1 (one line) when the agents were called and every call failed (a wrong key, a server that is
    # down): the rankings then silently fall back to the embedding baseline. Read from each manifest's
    # agent_calls (per role: called, failed); failed calls are in the cache and retried by a rerun.
    calls = [read_run_manifest(Path(out_dir) / name).get("agent_calls") or {}
             for name in list(metrics.get("datasets", {})) or [""]]
    called = sum(int(st.get("called", 0)) for c in calls for st in c.values())
    if called and sum(int(st.get("failed", 0)) for c in calls for st in c.values()) >= called:
        raise RunFailedError(f"all {called} agent calls of this run failed, so the X^R stages fell back to the "
                             "baseline ranking; their errors are in the cache's calls/*.jsonl, rerun the same "
                             "command to retry them")
