"""Scale benchmark: open time, memory and ANN quality at millions of vectors; Ray vs local embedding.

Run by hand (not part of the test suite); every figure is printed next to its target and, where the
issue asks for a ratio, next to a baseline measured in the same run. Parts (``--parts``):

``flat``   ``--flat-n`` x ``--flat-dim`` (default 1M x 512) synthetic CLIP-like vectors (the mixture
           of ``bench_retrieval.py``) built into a flat index through unirag's streaming writer. In a
           fresh process each: open time (target <= 1 s) against the previous format's way of
           opening the same files (SHA-256 of every file + ``faiss.read_index`` without mmap +
           reading every metadata row), and the first query's latency against a warm query's
           (target first <= 2x warm).
``ivfpq``  ``--ivf-n`` x ``--ivf-dim`` (default 10M x 256) vectors generated chunk by chunk into a
           ``.npy`` on disk (never all in RAM), built into IVF-PQ from that file read in chunks
           (plain reads, not a memmap, so the pages do not count as the build's RSS); candidates are
           re-scored from the memory-mapped raw vectors the index keeps. Measured in fresh
           processes: build peak RSS and search peak RSS (target <= 0.5x the raw vectors), open
           time and first/warm query, and recall@10 vs an exact scan of the same vectors at the
           throughput ratio to that scan (target recall >= 0.95 at >= 10x).
``ray``    embedding ``--ray-items`` real pool items (Myntra product photos + titles, from
           ``--myntra``) with the offline encoder: ``--engine local`` vs ``--engine ray`` on this
           machine (target throughput ratio >= 0.8), Ray's start-up time printed separately.

Caveat printed with the results: the page cache is not dropped between build and open (that needs
root); "open" is the time to a searchable index, and the first-query figure shows what is paid
lazily on first touch.

Usage:
  python benchmarks/bench_scale.py --workdir /tmp/scale                     # everything, full sizes
  python benchmarks/bench_scale.py --parts ivfpq --ivf-n 2000000 --workdir /tmp/scale   # smaller run
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
_env = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
from bench_retrieval import GEN_CHUNK, Mixture, recall  # noqa: E402  (sets 1 thread; undone below)

for _k, _v in _env.items():  # this benchmark uses every core, like a user's build would
    if _v is None:
        os.environ.pop(_k, None)
    else:
        os.environ[_k] = _v

REPO = Path(__file__).resolve().parents[1]
ENCODER_INFO = {"name": "synthetic-clustered", "spec": None, "config": {}, "fingerprint": "bench"}


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def child(mode: str, **kwargs) -> dict:
    """Run ``mode`` of this script in a fresh process; its last stdout line is a JSON result."""
    cmd = [sys.executable, __file__, "--_child", mode, "--_args", json.dumps(kwargs)]
    res = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    if res.returncode != 0:
        raise SystemExit(f"child {mode} failed:\n{res.stderr[-4000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


# -- children --------------------------------------------------------------------------------------
def child_build_flat(out: str, n: int, dim: int, clusters: int) -> dict:
    from unirag.data.records import Modality
    from unirag.index.writer import IndexWriter

    mix = Mixture(dim, clusters)

    def stream():
        offset = 0
        for block in mix.chunks(n):
            yield Modality.IMAGE, [{"did": f"d{offset + i}"} for i in range(len(block))], block
            offset += len(block)

    t0 = time.perf_counter()
    with IndexWriter(out, dim, ENCODER_INFO, "flat") as writer:
        for chunk in stream():
            writer.add(*chunk)
        writer.commit()
    return {"seconds": time.perf_counter() - t0, "peak_rss": peak_rss()}


def child_write_vectors(path: str, n: int, dim: int, clusters: int) -> dict:
    """Generate the vectors chunk by chunk straight into a .npy file (never all in RAM)."""
    from numpy.lib.format import write_array_header_1_0

    mix = Mixture(dim, clusters)
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (n, dim)})
        for block in mix.chunks(n):
            f.write(np.ascontiguousarray(block, dtype=np.float32).tobytes())
    return {"seconds": time.perf_counter() - t0, "peak_rss": peak_rss()}


def _npy_blocks(path: str, rows: int = GEN_CHUNK):
    """Blocks of a .npy matrix by plain reads (file pages stay page cache, not this process's RSS)."""
    from numpy.lib.format import read_array_header_1_0, read_magic

    with open(path, "rb") as f:
        read_magic(f)
        (n, dim), _, _ = read_array_header_1_0(f)
        for start in range(0, n, rows):
            count = min(rows, n - start)
            yield start, np.frombuffer(f.read(count * dim * 4), dtype=np.float32).reshape(count, dim)


def child_build_ivfpq(out: str, vectors: str, dim: int, params: dict) -> dict:
    from unirag.data.records import Modality
    from unirag.index.writer import IndexWriter

    def stream():
        for start, block in _npy_blocks(vectors):
            yield Modality.IMAGE, [{"did": f"d{start + i}"} for i in range(len(block))], block

    t0 = time.perf_counter()
    with IndexWriter(out, dim, ENCODER_INFO, "ivfpq", params) as writer:
        for chunk in stream():
            writer.add(*chunk)
        manifest = writer.commit()
    return {"seconds": time.perf_counter() - t0, "peak_rss": peak_rss(),
            "params": manifest["subindexes"]["image"]["params"]}


def child_full_read(index_dir: str) -> dict:
    """The previous format's open, on the same files: hash everything, read FAISS whole, read all metadata."""
    import faiss

    from unirag.index.manifest import read_manifest, sha256_file

    t0 = time.perf_counter()
    manifest = read_manifest(index_dir)
    folder = Path(index_dir) / manifest["data"]
    for name in manifest["files"]:
        sha256_file(folder / name)
    for entry in manifest["subindexes"].values():
        for shard in entry["shards"]:
            faiss.read_index(str(folder / shard["file"]))
    import sqlite3

    db = sqlite3.connect(folder / manifest["meta_file"])
    rows = db.execute("SELECT did, txt, img_path, source_id FROM meta").fetchall()
    return {"seconds": time.perf_counter() - t0, "rows": len(rows)}


def child_open_search(index_dir: str, queries: str, k: int, warm_runs: int = 20, batch: bool = False,
                      params: dict | None = None) -> dict:
    """Open, then time the first single query and warm single queries; optionally the whole batch."""
    from unirag.index.handle import Index

    q = np.load(queries)
    t0 = time.perf_counter()
    index = Index.open(index_dir)
    t_open = time.perf_counter() - t0
    for sub in index.subs.values():
        sub.params.update(params or {})
    t0 = time.perf_counter()
    index.topk(q[:1], k)
    first = time.perf_counter() - t0
    warm = []
    for i in range(1, warm_runs + 1):
        t0 = time.perf_counter()
        index.topk(q[i : i + 1], k)
        warm.append(time.perf_counter() - t0)
    out = {"open": t_open, "first": first, "warm": statistics.median(warm)}
    if batch:
        t0 = time.perf_counter()
        _, ids = index.topk(q, k)
        out["batch_seconds"] = time.perf_counter() - t0
        out["ids"] = [[int(index.metas[g].did[1:]) if g >= 0 else -1 for g in row] for row in ids]
    out["peak_rss"] = peak_rss()
    return out


def child_exact_scan(vectors: str, queries: str, k: int) -> dict:
    """Exact top-k over the .npy, block by block (the throughput baseline for ANN)."""
    import faiss

    q = np.load(queries)
    best_s = np.full((len(q), k), -np.inf, dtype=np.float32)
    best_i = np.full((len(q), k), -1, dtype=np.int64)
    t0 = time.perf_counter()
    for start, block in _npy_blocks(vectors, 262144):
        flat = faiss.IndexFlatIP(block.shape[1])
        flat.add(block)
        s, i = flat.search(q, k)
        cand_s = np.concatenate([best_s, s], axis=1)
        cand_i = np.concatenate([best_i, i + start], axis=1)
        order = np.argsort(-cand_s, axis=1)[:, :k]
        best_s, best_i = np.take_along_axis(cand_s, order, axis=1), np.take_along_axis(cand_i, order, axis=1)
    return {"seconds": time.perf_counter() - t0, "ids": best_i.tolist(), "peak_rss": peak_rss()}


def child_embed(engine: str, pool: str, images_root: str, out: str, shard_size: int) -> dict:
    from unirag import Index
    from unirag.encoders.registry import load_encoder

    t_start = 0.0
    if engine == "ray":
        import ray

        t0 = time.perf_counter()
        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False,
                 _system_config={"worker_niceness": 0})  # as unirag's own local start does
        t_start = time.perf_counter() - t0
    t0 = time.perf_counter()
    encoder = load_encoder(None)
    sharding = {"shard_size": shard_size} if engine == "ray" else {}  # the local build takes no shards
    manifest = Index.build(pool, out, encoder=encoder, images_root=images_root, engine=engine,
                           progress=False, **sharding).manifest
    return {"seconds": time.perf_counter() - t0, "startup": t_start, "items": manifest["total"]}


CHILDREN = {"build_flat": child_build_flat, "write_vectors": child_write_vectors,
            "build_ivfpq": child_build_ivfpq, "full_read": child_full_read, "open_search": child_open_search,
            "exact_scan": child_exact_scan, "embed": child_embed}


# -- parts -----------------------------------------------------------------------------------------
def part_flat(args, work: Path) -> None:
    n, d = args.flat_n, args.flat_dim
    print(f"\n## flat {n} x {d} ({n * d * 4 / 1e9:.2f} GB raw)")
    out = work / "flat"
    if not (out / "manifest.json").exists():
        b = child("build_flat", out=str(out), n=n, dim=d, clusters=args.clusters)
        print(f"build {b['seconds']:.1f} s, peak RSS {b['peak_rss'] / 1e9:.2f} GB")
    queries = work / f"queries{d}.npy"
    np.save(queries, Mixture(d, args.clusters).sample(200, seed=7))
    old = child("full_read", index_dir=str(out))
    new = child("open_search", index_dir=str(out), queries=str(queries), k=args.k)
    print(f"open {new['open']:.4f} s (target <= 1 s)  vs previous format's open of the same files "
          f"{old['seconds']:.2f} s  RATIO {old['seconds'] / new['open']:.0f}x faster")
    print(f"first query {new['first'] * 1e3:.1f} ms, warm query {new['warm'] * 1e3:.1f} ms  RATIO first/warm "
          f"{new['first'] / new['warm']:.2f} (target <= 2)")


def part_ivfpq(args, work: Path) -> None:
    n, d = args.ivf_n, args.ivf_dim
    raw = n * d * 4
    print(f"\n## IVF-PQ {n} x {d} ({raw / 1e9:.2f} GB raw)")
    vectors = work / f"vectors{n}x{d}.npy"
    if not vectors.exists():
        w = child("write_vectors", path=str(vectors), n=n, dim=d, clusters=args.clusters)
        print(f"vectors written to disk in {w['seconds']:.1f} s (generator peak RSS {w['peak_rss'] / 1e9:.2f} GB)")
    out = work / f"ivfpq{n}"
    params = {"nlist": args.ivf_nlist}
    if not (out / "manifest.json").exists():
        b = child("build_ivfpq", out=str(out), vectors=str(vectors), dim=d, params=params)
        print(f"build {b['seconds']:.1f} s (nlist {b['params']['nlist']}, pq_m {b['params']['pq_m']}), peak RSS "
              f"{b['peak_rss'] / 1e9:.2f} GB  RATIO build RSS / raw {b['peak_rss'] / raw:.3f} (target <= 0.5)")
    queries = work / f"queries{d}.npy"
    np.save(queries, Mixture(d, args.clusters).sample(args.queries, seed=7))
    exact_cache = work / f"exact{n}x{d}q{args.queries}k{args.k}.json"
    if not exact_cache.exists():
        exact_cache.write_text(json.dumps(child("exact_scan", vectors=str(vectors), queries=str(queries), k=args.k)))
    e = json.loads(exact_cache.read_text())
    print(f"exact scan of the same vectors: {args.queries} queries in {e['seconds']:.1f} s (search RSS "
          f"{e['peak_rss'] / 1e9:.2f} GB)")
    for nprobe in [int(x) for x in str(args.nprobe).split(",")]:
        for kf in [float(x) for x in str(args.k_factor).split(",")]:
            s = child("open_search", index_dir=str(out), queries=str(queries), k=args.k, batch=True,
                      params={"nprobe": nprobe, "refine_k_factor": kf})
            rec = recall(np.array(e["ids"]), np.array(s["ids"]), args.k)
            speed = e["seconds"] / s["batch_seconds"]
            print(f"nprobe {nprobe} refine x{kf:g}: open {s['open']:.4f} s (target <= 1 s); first query "
                  f"{s['first'] * 1e3:.1f} ms, warm {s['warm'] * 1e3:.1f} ms RATIO first/warm "
                  f"{s['first'] / s['warm']:.2f} (target <= 2); search peak RSS {s['peak_rss'] / 1e9:.2f} GB "
                  f"RATIO search RSS / raw {s['peak_rss'] / raw:.3f} (target <= 0.5); {args.queries} queries "
                  f"{s['batch_seconds']:.2f} s, recall@{args.k} {rec:.4f} (target >= 0.95) RATIO throughput "
                  f"ANN/exact {speed:.1f}x (target >= 10)")


def part_ray(args, work: Path) -> None:
    from unirag.data.importers.generic import import_generic

    data = work / "myntra_pool"
    if not (data / "pool.jsonl").exists():
        import_generic(args.myntra / "products.jsonl", args.myntra, data, caption_field="productDisplayName",
                       limit=args.ray_items // 2, show_progress=False)
    pool = data / "pool.jsonl"
    n = sum(1 for line in pool.open() if line.strip())
    print(f"\n## embedding {n} real pool items (Myntra photos + titles), offline encoder, this machine")
    local = child("embed", engine="local", pool=str(pool), images_root=str(args.myntra), out=str(work / "emb_local"),
                  shard_size=args.ray_shard_size)
    ray_ = child("embed", engine="ray", pool=str(pool), images_root=str(args.myntra), out=str(work / "emb_ray"),
                 shard_size=args.ray_shard_size)
    tl, tr = local["items"] / local["seconds"], ray_["items"] / ray_["seconds"]
    print(f"local {local['seconds']:.1f} s = {tl:.1f} items/s; ray {ray_['seconds']:.1f} s = {tr:.1f} items/s "
          f"(+ Ray start-up {ray_['startup']:.1f} s, not counted)  RATIO ray/local throughput {tr / tl:.2f} "
          "(target >= 0.8)")
    print(f"per-item cost on this machine: local {local['seconds'] / local['items'] * 1e3:.1f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default="flat,ivfpq,ray")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/unirag-bench-scale"),
                    help="kept between runs: built indexes and vectors are reused")
    ap.add_argument("--flat-n", type=int, default=1_000_000)
    ap.add_argument("--flat-dim", type=int, default=512)
    ap.add_argument("--ivf-n", type=int, default=10_000_000)
    ap.add_argument("--ivf-dim", type=int, default=256)
    ap.add_argument("--ivf-nlist", type=int, default=None, help="default: unirag's automatic choice")
    ap.add_argument("--nprobe", default="32", help="IVF lists probed; a comma list measures each")
    ap.add_argument("--k-factor", default="8", help="re-scored shortlist = k-factor x k; a comma list measures each")
    ap.add_argument("--clusters", type=int, default=2000)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--myntra", type=Path, default=REPO.parent / "shared" / "data" / "myntra-fashion-3k")
    ap.add_argument("--ray-items", type=int, default=2000)
    ap.add_argument("--ray-shard-size", type=int, default=250)
    ap.add_argument("--_child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--_args", default="{}", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._child:
        print(json.dumps(CHILDREN[args._child](**json.loads(args._args))))
        return
    args.workdir.mkdir(parents=True, exist_ok=True)
    print(f"# bench_scale on {os.cpu_count()} CPUs; page cache not dropped (see docstring)")
    parts = {"flat": part_flat, "ivfpq": part_ivfpq, "ray": part_ray}
    for name in args.parts.split(","):
        parts[name](args, args.workdir)


if __name__ == "__main__":
    main()
