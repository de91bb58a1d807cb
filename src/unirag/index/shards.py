"""The unit of distributed embedding: one contiguous shard of the pool -> ``.npy`` vectors + ids.

The pool is cut into ``n`` contiguous shards (as UniIR's contiguous sampler and clip-retrieval's
partitions do); shard ``i`` reads only its lines of the pool (by byte offset) and writes
``shard-<i>.npy`` (float32, L2-normalised, pool order), ``shard-<i>.ids`` (one id per row) and, last,
``shard-<i>.done.json`` (rows, encoder fingerprint, skipped images). Each file is written under a
temporary name and renamed, so a kill never leaves a half shard that counts as done, and a rerun
embeds only the shards without a done marker. ``plan.json`` fixes the cut and the encoder, so that
workers on several machines (Ray actors, or torchrun/slurm with ``--shard i/n``) agree on it.
"""

from __future__ import annotations

import itertools
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from unirag.data.images import BadImageReport
from unirag.data.jsonl import parse_json_line
from unirag.data.mbeir import parse_candidate
from unirag.errors import ConfigError, InputError
from unirag.index.directory import index_lock
from unirag.index.encoding import count_lines, encode_chunks
from unirag.runs.atomic import atomic_open, atomic_write_bytes

PLAN = "plan.json"
#: Default pool items per shard (the unit of resumption and of scheduling).
DEFAULT_SHARD_SIZE = 50_000


@dataclass
class ShardPlan:
    """How the pool is cut: shard ``i`` holds pool items ``starts[i] .. starts[i+1]-1``."""

    pool: str
    pool_bytes: int
    count: int
    n_shards: int
    starts: list[int]
    offsets: list[int]  # byte offset of the first line of each shard
    lines: list[int]  # line number (from 1) of that line
    encoder: dict[str, Any]


def load_or_create_plan(shards_dir: str | Path, pool: str | Path, encoder_info: dict[str, Any],
                        n_shards: int | None = None, shard_size: int = DEFAULT_SHARD_SIZE) -> ShardPlan:
    """The folder's plan; created on first use (under a lock, so concurrent workers agree).

    An existing plan must be for the same pool file (path and size), the same encoder fingerprint
    and, if ``n_shards`` is given, the same number of shards.
    """
    shards_dir = Path(shards_dir)
    pool = Path(pool).resolve()
    shards_dir.mkdir(parents=True, exist_ok=True)
    with index_lock(shards_dir, name=".plan.lock"):
        path = shards_dir / PLAN
        if path.exists():
            plan = read_plan(shards_dir)
            problems = []
            if plan.pool != str(pool) or plan.pool_bytes != pool.stat().st_size:
                problems.append(f"pool {plan.pool} ({plan.pool_bytes} bytes)")
            if plan.encoder.get("fingerprint") != encoder_info.get("fingerprint"):
                problems.append(f"encoder {plan.encoder.get('name')!r} (fingerprint {plan.encoder.get('fingerprint')})")
            if n_shards is not None and n_shards != plan.n_shards:
                problems.append(f"{plan.n_shards} shards")
            if problems:
                raise InputError(f"this shards folder was planned for {', '.join(problems)}; use another shards "
                                 "folder or delete this one to start over", path=path)
            return plan
        count = count_lines(pool)  # the non-blank lines, cut into shards: where each starts (offset, line)
        if count == 0:
            raise InputError("nothing to index: the pool has no candidates", path=pool)
        n = n_shards or max(1, -(-count // shard_size))
        if n > count:
            raise ConfigError(f"{n} shards for a pool of {count} candidates: use at most {count}")
        starts = [i * count // n for i in range(n)]
        wanted = set(starts)
        offsets, lines = {}, {}
        with pool.open("rb") as f:
            pos, item = 0, 0
            for lineno, line in enumerate(f, start=1):
                if line.strip():
                    if item in wanted:
                        offsets[item], lines[item] = pos, lineno
                    item += 1
                pos += len(line)
        plan = ShardPlan(str(pool), pool.stat().st_size, count, n, starts, [offsets[s] for s in starts],
                         [lines[s] for s in starts],
                         {k: encoder_info.get(k) for k in ("name", "spec", "dim", "fingerprint", "config")})
        atomic_write_bytes(path, json.dumps(asdict(plan), indent=1).encode())
        return plan


def read_plan(shards_dir: str | Path) -> ShardPlan:
    path = Path(shards_dir) / PLAN
    try:
        return ShardPlan(**json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise InputError("no plan.json: not a shards folder written by unirag", path=shards_dir) from None
    except (ValueError, TypeError) as e:
        raise InputError(f"corrupt shard plan ({e})", path=path) from None


def done_record(shards_dir: str | Path, i: int) -> dict[str, Any] | None:
    path = Path(shards_dir) / f"shard-{i:05d}.done.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


def embed_shard(shards_dir: str | Path, plan: ShardPlan, i: int, encoder, images_root: str | Path | None,
                batch_size: int = 64) -> dict[str, Any]:
    """Embed shard ``i`` of ``plan`` with ``encoder`` and write its files; skip it if already done.

    Returns the shard's done record (with ``"skipped": True`` when nothing had to be done).
    """
    shards_dir = Path(shards_dir)
    done = done_record(shards_dir, i)
    if done is not None:
        return {**done, "skipped": True}
    if encoder.fingerprint() != plan.encoder.get("fingerprint"):
        raise ConfigError(f"shard {i}: encoder {encoder.name!r} (fingerprint {encoder.fingerprint()}) is not the "
                          f"one planned for this shards folder ({plan.encoder.get('name')!r}, fingerprint "
                          f"{plan.encoder.get('fingerprint')})")
    started = time.time()
    bad = BadImageReport()
    pool = Path(plan.pool)
    want = (plan.starts[i + 1] if i + 1 < plan.n_shards else plan.count) - plan.starts[i]
    with pool.open("rb") as f:  # the shard's candidates, read from its byte offset only
        f.seek(plan.offsets[i])
        lines = ((lineno, raw) for lineno, raw in enumerate(f, start=plan.lines[i]) if raw.strip())
        items = [parse_candidate(parse_json_line(raw, pool, n), pool, n)
                 for n, raw in itertools.islice(lines, want)]
    if len(items) != want:
        raise InputError(f"shard {i} expected {want} candidates but the pool ended early: the pool changed "
                         "since the plan was made; start a new shards folder", path=pool)
    skipped: list[dict[str, str]] = []
    found: dict[str, np.ndarray] = {}  # did -> vector
    for _, group, kept, vectors in encode_chunks(encoder, items, batch_size, images_root, bad, len(items)):
        found.update(zip([c.did for c in kept], vectors, strict=True))
        lost = [c for c in group if c.did not in found]
        skipped += [{"did": c.did, "path": p, "reason": r}
                    for c, (p, r) in zip(lost, bad.bad[len(bad.bad) - len(lost):], strict=True)]
    ids = [c.did for c in items if c.did in found]  # pool order
    dim = int(encoder.dim)
    vectors = np.stack([found[d] for d in ids]).astype(np.float32) if ids else np.zeros((0, dim), dtype=np.float32)
    name = f"shard-{i:05d}"
    with atomic_open(shards_dir / f"{name}.npy", "wb") as f:
        np.save(f, vectors)
    atomic_write_bytes(shards_dir / f"{name}.ids", "".join(f"{d}\n" for d in ids).encode())
    record = {"shard": i, "rows": len(ids), "dim": dim, "pool_rows": len(items),
              "encoder_fingerprint": encoder.fingerprint(), "seconds": round(time.time() - started, 3),
              "bad_images": skipped}
    atomic_write_bytes(shards_dir / f"{name}.done.json", json.dumps(record).encode())
    return record
