"""``unirag evaluate ...``: one subcommand per kind of output, each in its own module."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from unirag.cli.main import LazyGroup

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "retrieval": ("unirag.cli.evaluate_retrieval_cmd:retrieval", "hit@k, recall@k, MRR@k of a retrieval run."),
    "captions": ("unirag.cli.evaluate_captions_cmd:captions", "BLEU, METEOR, ROUGE-L, CIDEr, SPICE of a caption run."),
    "images": ("unirag.cli.evaluate_images_cmd:images", "FID, CLIP Score, Inception Score of an image run."),
}


@click.group("evaluate", cls=LazyGroup, lazy=SUBCOMMANDS)
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
