"""``unirag retrieve``: top-k candidates and image-caption pairs per query."""

from __future__ import annotations

from pathlib import Path

import click

from unirag.cli.options import (
    behaviour_options,
    decode_option,
    device_options,
    index_memory_option,
    instruction_options,
)


@click.command("retrieve")
@click.option("--index", "index_dir", required=True, type=click.Path(path_type=Path), help="Index directory.")
@click.option("--queries", required=True, type=click.Path(path_type=Path), help="M-BEIR queries JSONL.")
@click.option("--images-root", "query_images_root", type=click.Path(path_type=Path), default=None,
              help="Folder the queries' image paths are relative to.")
@click.option("--k", "k", type=int, default=5, show_default=True, help="Candidates and pairs per query.")
@click.option("--out", "out", required=True, type=click.Path(path_type=Path),
              help="Run file (JSONL); a TREC run file is written beside it (.trec).")
@click.option("--modality", default="any", show_default=True,
              help="Candidate modality to search: text, image, image,text or any.")
@click.option("--exclude-positives", "exclude_positives", type=click.Path(path_type=Path), default=None,
              help="Qrels file: drop each query's own positives from candidates and pairs (no leakage).")
@click.option("--encoder", default=None,
              help="Encoder to embed the queries (default: the one recorded in the index).")
@click.option("--pool-images-root", type=click.Path(path_type=Path), default=None,
              help="Folder the pool's image paths are relative to (default: the index's recorded images root).")
@click.option("--verify/--no-verify", default=False, show_default=True,
              help="Re-hash the index files on open (reads the whole index; open checks sizes anyway).")
@device_options
@decode_option()
@index_memory_option
@instruction_options
@behaviour_options()
def retrieve(no_instructions: bool, decode, settings, **opts) -> None:
    """Retrieve the top K candidates and K image-caption pairs for every query."""
    from unirag.retrieval.batch_run import run_retrieval

    summary = run_retrieval(**opts, use_instructions=not no_instructions, progress=True, profile=settings,
                            engine=decode)
    short, replaced, leaks = summary.short, summary.replaced, summary.leaks
    click.echo(f"{len(summary.results)} queries -> {summary.run_path} and {summary.trec_path}"
               + (f"; {replaced} wrong-modality candidate(s) replaced by their complement" if replaced else "")
               + (f"; {short} quer(ies) with fewer than {summary.k} pairs" if short else "")
               + (f"; near-duplicates of the query: {leaks['flagged']} flagged, {leaks['excluded']} excluded, "
                  f"leak rate {leaks['leak_rate']:.1%}" if leaks and leaks["flagged"] else ""))
