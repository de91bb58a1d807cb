"""``unirag run EXPERIMENT.yaml``: run a grid of caption/image runs, each cell resumable."""

from __future__ import annotations

import sys

import click


@click.command("run")
@click.argument("experiment", type=click.Path(dir_okay=False))
@click.option("--only", multiple=True, help="Run only cells whose name matches this glob (repeatable).")
@click.option("--list", "list_only", is_flag=True, help="List the cells and their state; run nothing.")
@click.option("--limit", type=int, default=None, help="Only the first N queries of every cell (smoke run).")
@click.option("--no-progress", is_flag=True, default=False)
def run(experiment, only, list_only, limit, no_progress) -> None:
    """Run every cell of EXPERIMENT.yaml into OUT/<generator>/<mode>-k<k>[-<retriever>]; rerun to resume."""
    from pathlib import Path

    from unirag.pipelines.experiment import load_experiment, run_experiment, select_cells

    if list_only:
        spec, cells = load_experiment(experiment)
        from unirag.runs.rundir import read_run_manifest

        for cell in select_cells(cells, tuple(only)):
            m = read_run_manifest(Path(spec["out"]) / cell.name)
            state = "not started"
            if m:
                c = m.get("counts", {})
                state = f"{m.get('status')} ({c.get('ok', 0)}/{c.get('queries', '?')} ok)"
            click.echo(f"{cell.name:60s} {state}")
        return
    results = run_experiment(experiment, tuple(only), progress=not no_progress, limit=limit, echo=click.echo)
    failed = [r for r in results if r["status"] != "ok"]
    incomplete = [r for r in results if r["status"] == "ok" and r["counts"].get("ok") != r["counts"].get("queries")]
    click.echo(f"{len(results) - len(failed)}/{len(results)} cells ran; {len(incomplete)} with failed queries "
               "(rerun to retry them)")
    if failed:
        for r in failed:
            click.echo(f"  {r['cell']}: {r['error']}", err=True)
        sys.exit(1)
