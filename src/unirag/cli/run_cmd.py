"""``unirag run EXPERIMENT.yaml``: run a grid of caption/image/CIR runs, each cell resumable."""

from __future__ import annotations

import sys

import click

from unirag.cli.options import behaviour_options, engine_options, key_values


@click.command("run")
@click.argument("experiment", type=click.Path(dir_okay=False))
@click.option("--only", multiple=True, help="Run only cells whose name matches this glob (repeatable).")
@click.option("--list", "list_only", is_flag=True, help="List the cells and their state; run nothing.")
@click.option("--dry-run", is_flag=True,
              help="Print every cell's resolved configuration (generator, retriever, k, profile and settings, data "
                   "files, checkpoints, API keys) with the paper's figures; exit 2 naming what is missing.")
@click.option("--limit", type=int, default=None, help="Only the first N queries of every cell (smoke run).")
@click.option("--data-root", type=click.Path(file_okay=False), default=None,
              help="Resolve the grid's relative data paths from here instead of the YAML file's folder.")
@click.option("--out", "out", type=click.Path(file_okay=False), default=None, help="Output folder instead of the grid's.")
@click.option("--generator", "generator_map", multiple=True, metavar="SPEC=SPEC",
              help="Run another generator in place of one the grid names, e.g. hf:llava-hf/x=hf:./my-llava (repeatable).")
@click.option("--option", "option_pairs", multiple=True, metavar="KEY=VALUE",
              help="A run or generator option for every cell, e.g. base_url=http://127.0.0.1:8000/v1 (repeatable).")
@click.option("--no-progress", is_flag=True, default=False)
@behaviour_options(raw=True)
@engine_options("grid")
def run(experiment, only, list_only, dry_run, limit, data_root, out, generator_map, option_pairs, no_progress,
        profile, setting_overrides, selection, engine) -> None:
    """Run every cell of EXPERIMENT.yaml into OUT/<generator>/<mode>-k<k>[-<retriever>]; rerun to resume.

    --profile and --set apply to every cell (over the grid's own profile: and settings:).
    """
    from unirag.errors import ConfigError
    from unirag.pipelines.experiment import cell_states, run_experiment
    from unirag.pipelines.experiment_grid import GridOverrides, load_experiment

    overrides = GridOverrides(data_root=data_root, out=out, generators=key_values(generator_map, "--generator", False),
                              options=key_values(option_pairs, "--option", True), profile=profile,
                              settings=setting_overrides)
    if dry_run:
        from unirag.pipelines.experiment_plan import plan_cell

        spec, cells = load_experiment(experiment, overrides, tuple(only))
        plans = [plan_cell(c) for c in cells]  # every selected cell's plan: what --dry-run prints
        if spec.get("source"):
            click.echo(f"source: {spec['source']}")
        click.echo(f"out: {spec['out']}")
        for i, plan in enumerate(plans, start=1):
            click.echo(f"[{i}/{len(plans)}] " + "\n".join(plan.lines))
        missing = sorted({m for p in plans for m in p.missing})
        if missing:
            click.echo("missing:\n" + "\n".join(f"  {m}" for m in missing), err=True)
            raise ConfigError(f"{len(missing)} input(s) missing for {sum(1 for p in plans if p.missing)} of "
                              f"{len(plans)} cell(s): {'; '.join(missing[:5])}" + (" ..." if len(missing) > 5 else ""))
        click.echo(f"{len(plans)} cell(s) ready to run")
        return
    if list_only:
        for name, state in cell_states(experiment, tuple(only), overrides):
            click.echo(f"{name:60s} {state}")
        return
    results = run_experiment(experiment, tuple(only), progress=not no_progress, limit=limit, echo=click.echo,
                             overrides=overrides, selection=selection,
                             engine=engine)
    failed = [r for r in results if r["status"] != "ok"]
    incomplete = [r for r in results if r["status"] == "ok" and r["counts"].get("ok") != r["counts"].get("queries")]
    short = [r for r in results if r["status"] == "ok" and r["counts"].get("short")]
    click.echo(f"{len(results) - len(failed)}/{len(results)} cells ran; {len(incomplete)} with failed queries "
               "(rerun to retry them)"
               + "".join(f"; {r['cell']}: {r['counts']['short']} quer(ies) with fewer examples than asked"
                         for r in short))
    if failed:
        click.echo("\n".join(f"  {r['cell']}: {r['error']}" for r in failed), err=True)
        sys.exit(1)
