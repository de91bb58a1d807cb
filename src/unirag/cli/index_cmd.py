"""``unirag index build`` and ``unirag index info``."""

from __future__ import annotations

import json
from pathlib import Path

import click

from unirag.cli.options import (
    RAY_OPTIONS,
    behaviour_options,
    decode_option,
    device_options,
    key_values,
    options,
)
from unirag.errors import ConfigError


@click.group("index")
def index_group() -> None:
    """Build or inspect a FAISS index of an M-BEIR candidate pool."""


@index_group.command("build")
@click.option("--pool", "pool", required=True, type=click.Path(path_type=Path), help="M-BEIR candidate pool JSONL.")
@click.option("--images-root", type=click.Path(path_type=Path), default=None,
              help="Folder the pool's img_path values are relative to.")
@click.option("--out", "out", type=click.Path(path_type=Path), default=None,
              help="Index directory to write (required unless --shard with --shards-dir).")
@click.option("--encoder", default=None,
              help="Encoder name, Hugging Face id, local path, uniir:..., or python:MODULE:FACTORY for your own "
                   "(default: the offline encoder). With "
                   "--embeddings: the model that made them, recorded so queries use the same one.")
@click.option("--index-type", type=click.Choice(["flat", "hnsw", "ivfpq"]), default="flat", show_default=True,
              help="flat = exact inner product; hnsw / ivfpq = approximate, for large pools.")
@click.option("--param", "params", multiple=True,
              help="Index parameter override, e.g. --param M=48 --param nprobe=64 --param shard_size=500000.")
@click.option("--batch-size", type=int, default=64, show_default=True,
              help="Candidates encoded per chunk (memory is bounded by one chunk per modality).")
@click.option("--engine", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="local = this process; ray = embed pool shards on Ray Data, resumable by shard.")
@options(RAY_OPTIONS)  # --workers, --gpus-per-worker, --ray-address: as generation runs take them
@click.option("--shards-dir", type=click.Path(path_type=Path), default=None,
              help="Folder for the embedding shards (default: OUT/shards).")
@click.option("--shard-size", type=int, default=None,
              help="Pool items per shard for --engine ray (default 50000).")
@click.option("--shard", "shard_spec", default=None,
              help="Embed only shard i of n (0-based, e.g. 3/8) into --shards-dir, without Ray, and stop; "
                   "then build with --embeddings SHARDS_DIR.")
@click.option("--embeddings", type=click.Path(path_type=Path), default=None,
              help="Precomputed vectors: a .npy matrix, a Parquet file (id + embedding columns) or a shards folder.")
@click.option("--ids", type=click.Path(path_type=Path), default=None,
              help="With a .npy --embeddings: one candidate id per line, row order (default: the pool's order).")
@click.option("--allow-shrink", is_flag=True,
              help="Replace an existing index even if this build loses a modality or more than 10% of one "
                   "(the index_max_shrink setting), e.g. because the images root is wrong.")
@device_options
@decode_option()
@behaviour_options(selection=False)
def build(pool: Path, images_root: Path | None, out: Path | None, encoder: str | None, index_type: str,
          params: tuple[str, ...], batch_size: int, shards_dir: Path | None, shard_spec: str | None,
          embeddings: Path | None, ids: Path | None, allow_shrink: bool, device: str, dtype: str, decode,
          settings=None, **ray) -> None:
    """Encode every candidate of POOL (or take --embeddings) and write an index to OUT (streaming, atomic)."""
    from unirag.encoders.registry import precision_options

    # how the candidates are encoded, the same for one shard (--shard) and a whole build
    # uniir_precision: official UniIR precision is float32 weights under float16 autocast, for every build that
    # encodes (local, Ray workers, --shard); --embeddings encodes nothing (the vectors are given)
    encoding = dict(encoder=encoder, images_root=images_root, batch_size=batch_size, device=device,
                    decode_workers=decode.decode_workers, **precision_options(encoder, dtype, settings))
    if encoding.get("autocast") and embeddings is not None:
        click.echo("note: uniir_precision official applies to encoding, and --embeddings encodes nothing: the "
                   "vectors keep the precision that made them", err=True)

    overrides = key_values(params, "--param", True)
    if ids is not None and embeddings is None:
        raise ConfigError("--ids goes with --embeddings")
    from unirag.index.handle import Index

    if shard_spec is not None:
        if shards_dir is None and out is None:
            raise ConfigError("--shard needs --shards-dir (or --out, whose shards/ folder is used)")
        shards_dir = shards_dir if shards_dir is not None else out / "shards"
        record = Index.embed_shard(pool, shard_spec, shards_dir, **encoding)
        state = "already done" if record.get("skipped") else f"embedded in {record['seconds']:.1f}s"
        click.echo(f"shard {shard_spec}: {record['rows']} vectors {state} ({shards_dir})")
        return
    if out is None:
        raise ConfigError("--out is required (the index directory to write)")
    if embeddings is not None:
        index = Index.from_embeddings(pool, embeddings, out, encoder=encoder, ids=ids,
                                      images_root=images_root, index_type=index_type, params=overrides,
                                      allow_shrink=allow_shrink)
        if index.manifest["encoder"].get("fingerprint") is None:
            click.echo("note: no --encoder given: the index records no encoder, so queries must be given as "
                       "vectors (pass --encoder to record the model that made the embeddings)", err=True)
    else:
        index = Index.build(pool, out, index_type=index_type, params=overrides, progress=True,
                            shards_dir=shards_dir, allow_shrink=allow_shrink, **encoding,
                            **ray)  # **ray: --engine and its Ray options
    manifest = index.manifest
    counts = ", ".join(f"{m}: {n}" for m, n in manifest["counts"].items())
    click.echo(f"index written to {out} ({manifest['total']} candidates; {counts}; "
               f"encoder {manifest['encoder']['name']}; {index_type}; {manifest['build_seconds']:.1f}s)")


@index_group.command("info")
@click.argument("index_dir", type=click.Path(path_type=Path))
@click.option("--verify/--no-verify", default=False, show_default=True,
              help="Also re-hash every file (reads the whole index; same as 'unirag index verify').")
@click.option("--json", "as_json", is_flag=True, help="Print the manifest as JSON.")
def info(index_dir: Path, verify: bool, as_json: bool) -> None:
    """Describe the index in INDEX_DIR: encoder, sizes, index type, skipped images."""
    from unirag.index.manifest import read_manifest, verify_files

    manifest = read_manifest(index_dir)
    verify_files(index_dir, manifest, hashes=verify)
    if as_json:
        click.echo(json.dumps(manifest, indent=2, ensure_ascii=False))
        return
    enc = manifest["encoder"]
    click.echo(f"index      {index_dir} (data folder {manifest['data']})")
    click.echo(f"encoder    {enc.get('name')} (fingerprint {enc.get('fingerprint')}, spec {enc.get('spec')!r})")
    click.echo(f"vectors    {manifest.get('total')} x {manifest['dim']} ({manifest.get('metric', 'inner_product')})")
    for modality, entry in manifest["subindexes"].items():
        params = {k: v for k, v in (entry.get("params") or {}).items() if v is not None}
        click.echo(f"  {modality:<11}{entry['count']:>10}  {entry['type']}  {len(entry['shards'])} shard(s)  {params}")
    click.echo(f"built      {manifest.get('created')} in {manifest.get('build_seconds')}s from "
               f"{manifest.get('pool') or manifest.get('embeddings')}")
    bad = manifest.get("bad_images") or {}
    click.echo(f"skipped    {bad.get('count', 0)} unreadable image(s)")
    click.echo("checksums  " + ("verified" if verify else "not checked (sizes only; run 'unirag index verify')"))


@index_group.command("verify")
@click.argument("index_dir", type=click.Path(path_type=Path))
def verify(index_dir: Path) -> None:
    """Re-hash every file of INDEX_DIR against the SHA-256 recorded at build (reads the whole index)."""
    from unirag.index.manifest import verify_files

    report = verify_files(index_dir)
    click.echo(f"ok: {report['files']} file(s), {report['bytes']} bytes match the checksums in manifest.json")
