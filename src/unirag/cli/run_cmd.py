"""``unirag run EXPERIMENT.yaml``: run a grid of caption/image runs, each cell resumable."""

from __future__ import annotations

import sys

import click

from unirag.cli.engine_options import engine_from_cli, engine_options


@click.command("run")
@click.argument("experiment", type=click.Path(dir_okay=False))
@click.option("--only", multiple=True, help="Run only cells whose name matches this glob (repeatable).")
@click.option("--list", "list_only", is_flag=True, help="List the cells and their state; run nothing.")
@click.option("--limit", type=int, default=None, help="Only the first N queries of every cell (smoke run).")
@click.option("--no-progress", is_flag=True, default=False)
@engine_options
def run(experiment, only, list_only, limit, no_progress, **engine_opts) -> None:
    """Run every cell of EXPERIMENT.yaml into OUT/<generator>/<mode>-k<k>[-<retriever>]; rerun to resume."""
    from unirag.pipelines.experiment import cell_states, run_experiment

    if list_only:
        for name, state in cell_states(experiment, tuple(only)):
            click.echo(f"{name:60s} {state}")
        return
    results = run_experiment(experiment, tuple(only), progress=not no_progress, limit=limit, echo=click.echo,
                             engine=engine_from_cli(engine_opts))
    failed = [r for r in results if r["status"] != "ok"]
    incomplete = [r for r in results if r["status"] == "ok" and r["counts"].get("ok") != r["counts"].get("queries")]
    click.echo(f"{len(results) - len(failed)}/{len(results)} cells ran; {len(incomplete)} with failed queries "
               "(rerun to retry them)")
    if failed:
        for r in failed:
            click.echo(f"  {r['cell']}: {r['error']}", err=True)
        sys.exit(1)
