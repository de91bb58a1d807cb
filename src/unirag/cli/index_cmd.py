"""``unirag index build`` and ``unirag index info``."""

from __future__ import annotations

import json
from pathlib import Path

import click

from unirag.cli.model_options import device_options
from unirag.errors import ConfigError


def parse_params(values: tuple[str, ...]) -> dict:
    """``key=value`` pairs; values are parsed as JSON when possible (numbers, true/false, null)."""
    out = {}
    for item in values:
        if "=" not in item:
            raise ConfigError(f"--param expects key=value, got {item!r}")
        key, raw = item.split("=", 1)
        try:
            out[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            out[key.strip()] = raw
    return out


@click.group("index")
def index_group() -> None:
    """Build or inspect a FAISS index of an M-BEIR candidate pool."""


@index_group.command("build")
@click.option("--pool", "pool", required=True, type=click.Path(path_type=Path), help="M-BEIR candidate pool JSONL.")
@click.option("--images-root", type=click.Path(path_type=Path), default=None,
              help="Folder the pool's img_path values are relative to.")
@click.option("--out", "out", required=True, type=click.Path(path_type=Path), help="Index directory to write.")
@click.option("--encoder", "encoder_spec", default=None,
              help="Encoder name, Hugging Face id or local path (default: the offline encoder).")
@click.option("--index-type", type=click.Choice(["flat", "hnsw", "ivfpq"]), default="flat", show_default=True,
              help="flat = exact inner product; hnsw / ivfpq = approximate, for large pools.")
@click.option("--param", "params", multiple=True,
              help="Index parameter override, e.g. --param M=48 --param nprobe=64 (repeatable).")
@click.option("--batch-size", type=int, default=64, show_default=True,
              help="Candidates encoded per chunk (memory is bounded by one chunk per modality).")
@device_options
def build(pool: Path, images_root: Path | None, out: Path, encoder_spec: str | None, index_type: str,
          params: tuple[str, ...], batch_size: int, device: str, dtype: str) -> None:
    """Encode every candidate of POOL and write an index to OUT (streaming, atomic)."""
    from unirag.encoders.registry import load_encoder
    from unirag.errors import InputError
    from unirag.index.build import build_index
    from unirag.index.factory import resolve_params

    overrides = parse_params(params)
    resolve_params(index_type, overrides)  # fail on a bad option before any model loads
    if not pool.exists():
        raise InputError("candidate pool not found", path=pool)
    if batch_size <= 0:
        raise ConfigError(f"--batch-size must be positive, got {batch_size}")
    encoder = load_encoder(encoder_spec, device=device, dtype=dtype)
    manifest = build_index(pool, images_root, out, encoder, encoder_spec=encoder_spec, index_type=index_type,
                           batch_size=batch_size, params=overrides)
    counts = ", ".join(f"{m}: {n}" for m, n in manifest["counts"].items())
    click.echo(f"index written to {out} ({manifest['total']} candidates; {counts}; "
               f"encoder {manifest['encoder']['name']}; {index_type}; {manifest['build_seconds']:.1f}s)")
    _echo_bad_images(manifest)


def _echo_bad_images(manifest: dict) -> None:
    bad = manifest.get("bad_images") or {}
    if bad.get("count"):
        click.echo(f"warning: {bad['count']} image(s) missing or unreadable, skipped:", err=True)
        for item in bad.get("first", [])[:5]:
            click.echo(f"  {item['path']}: {item['reason']}", err=True)
        if bad["count"] > 5:
            click.echo(f"  ... and {bad['count'] - 5} more (listed in manifest.json)", err=True)


@index_group.command("info")
@click.argument("index_dir", type=click.Path(path_type=Path))
@click.option("--verify/--no-verify", default=False, show_default=True,
              help="Also re-hash every file (reads the whole index; same as 'unirag index verify').")
@click.option("--json", "as_json", is_flag=True, help="Print the manifest as JSON.")
def info(index_dir: Path, verify: bool, as_json: bool) -> None:
    """Describe the index in INDEX_DIR: encoder, sizes, index type, skipped images."""
    from unirag.index.manifest import check_sizes, read_manifest, verify_files

    manifest = read_manifest(index_dir)
    if verify:
        verify_files(index_dir, manifest)
    else:
        check_sizes(index_dir, manifest)
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
