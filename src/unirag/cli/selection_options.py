"""Example-selection options (diversity, true pairs, leakage guard, filters): one definition for
``unirag retrieve``, ``caption``, ``generate-images`` and ``run``; see :class:`unirag.Selection`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

_NAMES = ("diversity", "mmr_lambda", "one_per_image", "near_duplicates", "hash_threshold", "cosine_threshold",
          "caption_threshold", "pairs_from", "filters")

_OPTIONS = [
    click.option("--diversity", type=click.Choice(["none", "mmr"]), default="none", show_default=True,
                 help="Example diversity: none (relevance only, as the paper) or mmr (maximal marginal relevance "
                      "over pairs: the same or a near-duplicate photo, or a similar caption, is redundant)."),
    click.option("--mmr-lambda", type=float, default=0.7, show_default=True,
                 help="MMR weight of relevance against redundancy (1: relevance only)."),
    click.option("--one-per-image", is_flag=True, default=False,
                 help="No two examples show the same image (same did or same file content)."),
    click.option("--near-duplicates", type=click.Choice(["off", "report", "exclude"]), default="report",
                 show_default=True,
                 help="Leakage guard: flag examples whose image or caption copies the query's (report), or replace "
                      "them by the next candidate (exclude: use it for evaluation runs)."),
    click.option("--hash-threshold", type=int, default=None,
                 help="Near-duplicate images: largest dHash Hamming distance, of 64 bits (default 10)."),
    click.option("--cosine-threshold", type=float, default=None,
                 help="Near-duplicate images: smallest embedding cosine (default: not used)."),
    click.option("--caption-threshold", type=float, default=None,
                 help="Near-duplicate captions: smallest word-set Jaccard with a reference caption (default 0.7)."),
    click.option("--pairs-from", "pairs_from", multiple=True, type=click.Path(dir_okay=False),
                 help="M-BEIR query JSONL and/or qrels files (task 0 and 3) whose judgements pair captions with "
                      "their images before any retrieval completion (repeatable)."),
    click.option("--filter", "filters", multiple=True, metavar="FIELD=VALUE",
                 help="Search only candidates with FIELD=VALUE (repeatable: all must hold; a,b: either). Fields: "
                      "dataset (M-BEIR dataset by name or id, e.g. dataset=mscoco), modality, source_id, or any "
                      "src_content key."),
]


def selection_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Add the selection options to a command (they arrive as keyword arguments; see :func:`selection_of`)."""
    for option in reversed(_OPTIONS):
        f = option(f)
    return f


def selection_of(options: dict[str, Any]):
    """Pop the selection options from a command's keyword arguments and return the :class:`Selection`."""
    from unirag.retrieval.selection import Selection, parse_filters

    given = {name: options.pop(name) for name in _NAMES if name in options}
    return Selection.of(None, diversity=given.get("diversity"), mmr_lambda=given.get("mmr_lambda"),
                        one_per_image=given.get("one_per_image") or None,
                        near_duplicates=given.get("near_duplicates"), image_hash=given.get("hash_threshold"),
                        image_cosine=given.get("cosine_threshold"), caption=given.get("caption_threshold"),
                        pairs_from=tuple(given.get("pairs_from") or ()) or None,
                        where=parse_filters(given.get("filters")) or None)
