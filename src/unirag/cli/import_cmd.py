"""``unirag import coco|jsonl|csv``: turn captioned images into M-BEIR files (pool, queries, qrels)."""

from __future__ import annotations

from pathlib import Path

import click

from unirag.cli.options import options as click_options

# Options every importer shares; their values reach the importer as keyword arguments unchanged.
_COMMON = [
    click.option("--images", "images_root", required=True, type=click.Path(path_type=Path),
                 help="Images root: image paths in the input are relative to it."),
    click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
                 help="Output folder for pool.jsonl, queries_*.jsonl, qrels_*.txt, import_summary.json."),
    click.option("--seed", type=int, default=0, show_default=True,
                 help="Seed of the per-image caption sample for text->image queries."),
    click.option("--all-captions", is_flag=True,
                 help="Use every caption as a text->image query (default: one seeded sample per image)."),
    click.option("--limit", type=click.IntRange(min=1), default=None, help="Keep only the first N images."),
    click.option("--workers", type=click.IntRange(min=1), default=4, show_default=True,
                 help="Threads that check images."),
    click.option("--check", type=click.Choice(["decode", "verify", "exists", "none"]), default="decode",
                 show_default=True, help="How to check images: decode pixels (catches truncated files), "
                 "verify headers, only test existence, or none."),
    click.option("--allow-outside-images", "allow_outside_root", is_flag=True,
                 help="Import image paths that resolve outside --images ('..', absolute paths, symlinks "
                      "leading out); they are listed in import_summary.json (refused without this flag)."),
]
# The fields of a JSONL/CSV list (``jsonl`` and ``csv``).
_FIELDS = [
    click.option("--image-field", default="image", show_default=True, help="Field with the image path."),
    click.option("--caption-field", default=None,
                 help="Field with the caption(s): a string or a list [default: caption, else captions]."),
    click.option("--id-field", default=None,
                 help="Field with a stable image id [default: order of first appearance]."),
    click.option("--caption-sep", default=None,
                 help="Split a caption cell/string into several captions at this separator."),
    click.option("--delimiter", default=None, help="CSV cell delimiter [default: ',' or tab for .tsv]."),
]


@click.group("import")
def import_group() -> None:
    """Import captioned images into M-BEIR files: one shared pool of image and text candidates
    (paired by source id), image->text (task 3) and text->image (task 0) queries, and their qrels."""


def _importer(name: str, help_: str, run: str, options: list, **fixed) -> None:
    """Register ``unirag import NAME``: ``options`` in ``--help`` order; their values and ``fixed`` are the
    keyword arguments of ``run`` (:func:`unirag.data.importers.import_coco` or ``import_generic``)."""

    def command(**given) -> None:
        from unirag.data import importers

        summary = getattr(importers, run)(**given, **fixed)
        click.echo(summary.format())
        for key in ("pool", "queries_task3", "queries_task0", "qrels_task3", "qrels_task0"):
            click.echo(f"  {key}: {summary.files[key]}")

    import_group.command(name, help=help_)(click_options(options)(command))


_importer("coco", "Import a COCO captions file and its image folder.", "import_coco", [
    click.option("--captions", required=True, type=click.Path(dir_okay=False, path_type=Path),
                 help="COCO captions JSON (images[], annotations[]) or a JSONL with image + captions per "
                      "line."),
    *_COMMON,
    click.option("--name", default="coco", show_default=True, help="Dataset name: prefix of every did/qid."),
])
for _fmt, _help in ((None, "Import a JSONL (or, by extension, CSV/TSV) list of image paths with captions."),
                    ("csv", "Import a CSV/TSV file (header row) of image paths with captions.")):
    _importer(_fmt or "jsonl", _help, "import_generic", [
        click.option("--input", "input_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
                     help="JSONL (one object per line) or CSV/TSV with a header row."),
        *_COMMON, *_FIELDS,
        click.option("--name", default=None,
                     help="Dataset name: prefix of every did/qid [default: the input file's stem]."),
    ], fmt=_fmt)
