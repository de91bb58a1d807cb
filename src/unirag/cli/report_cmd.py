"""``unirag report``: paper-style tables, plots and HTML galleries; ``unirag report sampling``: §5.2.1 ablation.

``unirag report RUN_DIR... --out REPORT_DIR`` is shorthand for ``unirag report build ...``.
"""

from __future__ import annotations

from pathlib import Path

import click

from unirag.cli.options import bootstrap_options


class _ReportGroup(click.Group):
    """A group whose default subcommand is ``build``, so ``unirag report RUN... --out R`` works."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            args = ["build", *args]
        return super().parse_args(ctx, args)


@click.group("report", cls=_ReportGroup)
def report() -> None:
    """Tables, plots and a gallery from evaluated runs (default), or the sampling ablation.

    \b
    unirag report RUN_DIR... --out REPORT_DIR
    unirag report sampling sample --queries Q.jsonl --seed 1 --out SET1.jsonl
    unirag report sampling compare SET1.jsonl SET2.jsonl [--run-a DIR --run-b DIR]...
    """


@report.command("build")
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path), help="Report directory.")
@click.option("--max-cards", default=100, show_default=True, help="Gallery cards per run (first N queries).")
@click.option("--queries", type=click.Path(path_type=Path), default=None,
              help="Queries JSONL for the galleries (default: the path in each run's manifest).")
@click.option("--pool", type=click.Path(path_type=Path), default=None, help="Pool JSONL (default: from manifest).")
@click.option("--images-root", type=click.Path(path_type=Path), default=None,
              help="Images root of queries and pool (default: from manifest).")
@click.option("--no-gallery", is_flag=True, help="Only tables and plots.")
@click.option("--no-plots", is_flag=True, help="Skip the PNG plots.")
@click.option("--baseline", default=None,
              help="Run folder or row name: compare every run with it on the queries both scored (paired tests).")
@bootstrap_options
def build(out_dir: Path, no_gallery: bool, no_plots: bool, **opts) -> None:
    """Build REPORT_DIR/index.html, tables.md, tables/*.csv, plots/*.png and gallery/*.html.

    With --baseline, also each run's difference from the baseline with its paired bootstrap interval;
    differences significant in a paired randomization test (Holm-corrected) are marked with a dagger.
    """
    from unirag.reports.build import build_report

    if opts["baseline"] is not None and opts["resamples"] == 0:
        from unirag.errors import ConfigError

        raise ConfigError("--baseline needs --resamples above 0")
    written = build_report(out_dir=out_dir, **opts, gallery=not no_gallery, plots=not no_plots)
    click.echo((Path(out_dir) / "tables.md").read_text(encoding="utf-8"))
    for note in written["notes"]:
        click.echo(note)
    click.echo(f"{len(written['tables']) // 2} table(s), {len(written['plots'])} plot(s), "
               f"{sum(written['cards'].values())} gallery card(s)")
    click.echo(f"open {written['index']}")


@report.group("sampling")
def sampling() -> None:
    """Caption sampling ablation (paper §5.2.1): sample one caption per image, compare two samples."""


@sampling.command("sample")
@click.option("--queries", required=True, type=click.Path(path_type=Path),
              help="M-BEIR text->image queries (several captions per image).")
@click.option("--seed", required=True, type=int)
@click.option("--out", required=True, type=click.Path(path_type=Path), help="Sampled queries JSONL to write.")
def sample(queries: Path, seed: int, out: Path) -> None:
    """Draw one caption query per positive image (seeded) and save it as an M-BEIR queries file."""
    from unirag.data.mbeir import read_queries, write_queries
    from unirag.reports.sampling import sample_one_per_image

    drawn = sample_one_per_image(read_queries(queries), seed)
    write_queries(out, drawn)
    click.echo(f"sampled {len(drawn)} caption(s), one per image, seed {seed} -> {out}")


@sampling.command("compare")
@click.argument("set_a", type=click.Path(path_type=Path))
@click.argument("set_b", type=click.Path(path_type=Path))
@click.option("--run-a", multiple=True, type=click.Path(path_type=Path), help="Evaluated run on set A (repeat).")
@click.option("--run-b", multiple=True, type=click.Path(path_type=Path),
              help="Evaluated run on set B, paired with --run-a in order (repeat).")
@click.option("--out", type=click.Path(path_type=Path), default=None, help="Write the comparison as JSON.")
def compare(set_a: Path, set_b: Path, run_a: tuple[Path, ...], run_b: tuple[Path, ...], out: Path | None) -> None:
    """Overlap of two samples and, for paired runs, each metric's difference."""
    from unirag.reports.sampling import compare_sample_runs

    result = compare_sample_runs(set_a, set_b, run_a, run_b, out)
    overlap = result["overlap"]
    click.echo(f"set A: {overlap['n_a']} captions over {overlap['images_a']} images; set B: {overlap['n_b']} "
               f"captions over {overlap['images_b']} images; {overlap['common_captions']} captions in common "
               f"({100 * overlap['common_fraction']:.1f} %), {overlap['common_images']} images in common")
    for run in result["runs"]:
        click.echo(f"k={run['k']}: {run['name_a']} vs {run['name_b']}")
        for name, d in run["metrics"].items():
            click.echo(f"  {name:<10} {d['a']:9.2f} {d['b']:9.2f}  diff {d['diff']:+8.2f} ({d['rel_diff_pct']:+.2f} %)")
    if out is not None:
        click.echo(f"wrote {out}")
