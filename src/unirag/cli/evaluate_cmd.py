"""``unirag evaluate ...``: one subcommand per kind of output, each in its own module."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import click

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "retrieval": ("unirag.cli.evaluate_retrieval_cmd:retrieval", "hit@k, recall@k, MRR@k of a retrieval run."),
    "captions": ("unirag.cli.evaluate_captions_cmd:captions", "BLEU, METEOR, ROUGE-L, CIDEr, SPICE of a caption run."),
    "images": ("unirag.cli.evaluate_images_cmd:images", "FID, CLIP Score, Inception Score of an image run."),
}


class _LazyEvaluate(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in SUBCOMMANDS:
            return None
        module_name, attr = SUBCOMMANDS[name][0].split(":")
        return getattr(importlib.import_module(module_name), attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(n, h) for n, (_, h) in SUBCOMMANDS.items()])


@click.group("evaluate", cls=_LazyEvaluate)
def evaluate_group() -> None:
    """Score the output of a stage against its references."""


def bootstrap_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--resamples``, ``--bootstrap-seed`` and ``--ci-method``: how the 95 % intervals over queries are drawn."""
    from unirag.metrics.stats import DEFAULT_RESAMPLES, METHODS

    command = click.option("--ci-method", type=click.Choice(METHODS, case_sensitive=False), default="percentile",
                           show_default=True, help="Bootstrap interval: percentile or BCa.")(command)
    command = click.option("--bootstrap-seed", default=0, show_default=True,
                           help="Seed of the bootstrap resampling (and of the randomization test).")(command)
    return click.option("--resamples", default=DEFAULT_RESAMPLES, show_default=True, type=click.IntRange(min=0),
                        help="Bootstrap resamples of the queries for the 95 % intervals (0: no intervals).")(command)
