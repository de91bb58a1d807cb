"""``unirag retrieve``: top-k candidates and image-caption pairs per query."""

from __future__ import annotations

from pathlib import Path

import click

from unirag.cli.model_options import device_options, instruction_options


@click.command("retrieve")
@click.option("--index", "index_dir", required=True, type=click.Path(path_type=Path), help="Index directory.")
@click.option("--queries", required=True, type=click.Path(path_type=Path), help="M-BEIR queries JSONL.")
@click.option("--images-root", type=click.Path(path_type=Path), default=None,
              help="Folder the queries' image paths are relative to.")
@click.option("--k", "k", type=int, default=5, show_default=True, help="Candidates and pairs per query.")
@click.option("--out", "out", required=True, type=click.Path(path_type=Path),
              help="Run file (JSONL); a TREC run file is written beside it (.trec).")
@click.option("--modality", default="any", show_default=True,
              help="Candidate modality to search: text, image, image,text or any.")
@click.option("--exclude-positives", "exclude_positives", type=click.Path(path_type=Path), default=None,
              help="Qrels file: drop each query's own positives from candidates and pairs (no leakage).")
@click.option("--encoder", "encoder_spec", default=None,
              help="Encoder to embed the queries (default: the one recorded in the index).")
@click.option("--pool-images-root", type=click.Path(path_type=Path), default=None,
              help="Images root of the pool, if it moved since the index was built.")
@click.option("--verify/--no-verify", default=False, show_default=True,
              help="Re-hash the index files on open (reads the whole index; open checks sizes anyway).")
@device_options
@instruction_options
def retrieve(index_dir: Path, queries: Path, images_root: Path | None, k: int, out: Path, modality: str,
             exclude_positives: Path | None, encoder_spec: str | None, pool_images_root: Path | None,
             verify: bool, device: str, dtype: str, instructions: str | None, no_instructions: bool) -> None:
    """Retrieve the top K candidates and K image-caption pairs for every query."""
    from unirag.data.mbeir import read_qrels, read_queries
    from unirag.errors import ConfigError
    from unirag.index.store import parse_modality_filter
    from unirag.retrieval.retriever import Retriever
    from unirag.retrieval.run_io import write_retrieval_run

    if k <= 0:
        raise ConfigError(f"--k must be a positive integer, got {k}")
    parse_modality_filter(modality)
    query_list = read_queries(queries)
    qrels = read_qrels(exclude_positives) if exclude_positives is not None else None
    from unirag.encoders.registry import instruction_kwargs, load_encoder
    from unirag.index.manifest import read_manifest

    spec = encoder_spec if encoder_spec is not None else read_manifest(index_dir)["encoder"].get("spec")
    encoder = load_encoder(spec, device=device, dtype=dtype,
                           **instruction_kwargs(spec, instructions, no_instructions, str(queries)))
    retriever = Retriever(index_dir, encoder, verify=verify, pool_images_root=pool_images_root)
    results = retriever.retrieve(query_list, k, modality, exclude_qrels=qrels, query_images_root=images_root,
                                 progress=True)
    run_path, trec = write_retrieval_run(out, results)
    short = sum(1 for r in results if len(r.pairs) < k)
    replaced = sum(1 for r in results for c in r.candidates if c.replaced)
    click.echo(f"{len(results)} queries -> {run_path} and {trec}"
               + (f"; {replaced} wrong-modality candidate(s) replaced by their complement" if replaced else "")
               + (f"; {short} quer(ies) with fewer than {k} pairs" if short else ""))
