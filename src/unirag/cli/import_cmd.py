"""``unirag import coco|jsonl|csv``: turn captioned images into M-BEIR files (pool, queries, qrels)."""

from __future__ import annotations

from pathlib import Path

import click

_CHECKS = click.Choice(["decode", "verify", "exists", "none"])


def _with_options(*decorators):
    """Stack click options (or groups of them) so they appear in ``--help`` in the order listed.

    Click applies decorators bottom-up; listing them top-down here keeps the help order readable
    and lets the importers share option groups instead of repeating them.
    """

    def apply(f):
        for decorate in reversed(decorators):
            f = decorate(f)
        return f

    return apply


# Options every importer shares; their values reach the importer as keyword arguments unchanged.
_common = _with_options(
    click.option(
        "--images",
        "images_root",
        required=True,
        type=click.Path(path_type=Path),
        help="Images root: image paths in the input are relative to it.",
    ),
    click.option(
        "--out",
        "out_dir",
        required=True,
        type=click.Path(file_okay=False, path_type=Path),
        help="Output folder for pool.jsonl, queries_*.jsonl, qrels_*.txt, import_summary.json.",
    ),
    click.option(
        "--seed",
        type=int,
        default=0,
        show_default=True,
        help="Seed of the per-image caption sample for text->image queries.",
    ),
    click.option(
        "--all-captions",
        is_flag=True,
        help="Use every caption as a text->image query (default: one seeded sample per image).",
    ),
    click.option("--limit", type=click.IntRange(min=1), default=None, help="Keep only the first N images."),
    click.option(
        "--workers", type=click.IntRange(min=1), default=4, show_default=True, help="Threads that check images."
    ),
    click.option(
        "--check",
        type=_CHECKS,
        default="decode",
        show_default=True,
        help="How to check images: decode pixels (catches truncated files), verify headers, "
        "only test existence, or none.",
    ),
    click.option(
        "--allow-outside-images",
        "allow_outside_root",
        is_flag=True,
        help="Import image paths that resolve outside --images ('..', absolute paths, symlinks leading out); "
        "they are listed in import_summary.json (refused without this flag).",
    ),
)


def _report(summary) -> None:
    click.echo(summary.format())
    for key in ("pool", "queries_task3", "queries_task0", "qrels_task3", "qrels_task0"):
        click.echo(f"  {key}: {summary.files[key]}")


@click.group("import")
def import_group() -> None:
    """Import captioned images into M-BEIR files: one shared pool of image and text candidates
    (paired by source id), image->text (task 3) and text->image (task 0) queries, and their qrels."""


@import_group.command("coco")
@click.option(
    "--captions",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="COCO captions JSON (images[], annotations[]) or a JSONL with image + captions per line.",
)
@_common
@click.option("--name", default="coco", show_default=True, help="Dataset name: prefix of every did/qid.")
def coco(captions: Path, **options) -> None:
    """Import a COCO captions file and its image folder."""
    from unirag.data.importers import import_coco

    _report(import_coco(captions, **options))


def _generic(fmt: str | None):
    """The ``jsonl``/``csv`` command body: the same options, only the input format differs."""

    def command(input_path: Path, **options) -> None:
        from unirag.data.importers import import_generic

        _report(import_generic(input_path, fmt=fmt, **options))

    return _with_options(
        click.option(
            "--input",
            "input_path",
            required=True,
            type=click.Path(dir_okay=False, path_type=Path),
            help="JSONL (one object per line) or CSV/TSV with a header row.",
        ),
        _common,
        click.option("--image-field", default="image", show_default=True, help="Field with the image path."),
        click.option(
            "--caption-field",
            default=None,
            help="Field with the caption(s): a string or a list [default: caption, else captions].",
        ),
        click.option(
            "--id-field", default=None, help="Field with a stable image id [default: order of first appearance]."
        ),
        click.option(
            "--caption-sep",
            default=None,
            help="Split a caption cell/string into several captions at this separator.",
        ),
        click.option("--delimiter", default=None, help="CSV cell delimiter [default: ',' or tab for .tsv]."),
        click.option(
            "--name", default=None, help="Dataset name: prefix of every did/qid [default: the input file's stem]."
        ),
    )(command)


import_group.command(
    "jsonl", help="Import a JSONL (or, by extension, CSV/TSV) list of image paths with captions."
)(_generic(None))
import_group.command("csv", help="Import a CSV/TSV file (header row) of image paths with captions.")(
    _generic("csv")
)
