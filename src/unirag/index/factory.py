"""FAISS index types offered by ``--index-type`` and their default parameters.

* ``flat``  - exact inner product (``IndexFlatIP``); vectors are L2-normalised so this is cosine.
* ``hnsw``  - graph search (``IndexHNSWFlat``, inner product); no training, builds incrementally.
* ``ivfpq`` - inverted lists + product quantisation for pools of millions (M-BEIR's global pool is
  5.6M); trained on a bounded sample. With ``refine=true`` (default) the raw float32 vectors are
  kept in a file next to the index and read row by row: the shortlist found with compressed codes
  (``refine_k_factor`` x k) is re-scored exactly from them, so recall is close to exact search while
  RAM holds only the codes. With ``refine=false`` no raw vectors are kept; the index keeps a
  direct map so that stored vectors can still be reconstructed (approximately, from the codes).

Every type takes ``shard_size``: a sub-index with more vectors is cut into shards of at most that
many, one FAISS file each, searched one after the other with an exact top-k merge.
"""

from __future__ import annotations

import math
from typing import Any

import faiss

from unirag.errors import ConfigError

INDEX_TYPES = ("flat", "hnsw", "ivfpq")

#: Vectors per FAISS shard file (2 GiB of float32 at 512-d for flat); override with ``--param shard_size=N``.
DEFAULT_SHARD_SIZE = 1 << 20

DEFAULT_PARAMS: dict[str, dict[str, Any]] = {
    "flat": {"shard_size": DEFAULT_SHARD_SIZE},
    "hnsw": {"M": 32, "ef_construction": 80, "ef_search": 128, "shard_size": DEFAULT_SHARD_SIZE},
    # nlist=None: 4*sqrt(n) rounded to a power of two, chosen once the count is known.
    "ivfpq": {"nlist": None, "pq_m": None, "nbits": 8, "nprobe": 32, "train_size": 131072,
              "refine": True, "refine_k_factor": 8, "shard_size": 8 * DEFAULT_SHARD_SIZE},
}

#: Below this many vectors IVF-PQ cannot be trained sensibly (k-means needs ~39 points per list
#: and PQ 256 per code word); such a sub-index is built exactly and the manifest says so.
IVFPQ_MIN_COUNT = 4096


def resolve_params(index_type: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    if index_type not in INDEX_TYPES:
        raise ConfigError(f"unknown index type {index_type!r}; expected one of: {', '.join(INDEX_TYPES)}")
    params = dict(DEFAULT_PARAMS[index_type])
    for key, value in (overrides or {}).items():
        if key not in params:
            raise ConfigError(f"unknown parameter {key!r} for index type {index_type!r}; "
                              f"known: {', '.join(params) or 'none'}")
        params[key] = value
    if not isinstance(params["shard_size"], int) or isinstance(params["shard_size"], bool) \
            or params["shard_size"] <= 0:
        raise ConfigError(f"shard_size must be a positive integer, got {params['shard_size']!r}")
    return params


def ivfpq_shape(n: int, dim: int, params: dict[str, Any]) -> dict[str, Any]:
    """Concrete nlist / pq_m for ``n`` vectors of size ``dim``."""
    # at least ~32 training points per list (k-means quality), and never more lists than n / 39
    auto = min(2 ** round(math.log2(max(1.0, 4 * math.sqrt(n)))), int(params["train_size"]) // 32)
    nlist = int(max(1, min(params["nlist"] or auto, n // 39)))
    # pq_m: ~8 dimensions per sub-quantiser, a divisor of dim
    pq_m = params["pq_m"] or max(m for m in range(1, dim + 1) if dim % m == 0 and m <= max(1, dim // 8))
    if dim % pq_m:
        raise ConfigError(f"pq_m={pq_m} must divide the vector size {dim}")
    return {**params, "nlist": nlist, "pq_m": int(pq_m)}


def new_index(kind: str, dim: int, params: dict[str, Any] | None = None):
    """An empty inner-product FAISS index of ``kind``; an IVF-PQ one is untrained: the caller trains it
    on a sample (re-scoring is done by the store)."""
    if kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, int(params["M"]), faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = int(params["ef_construction"])
        index.hnsw.efSearch = int(params["ef_search"])
        return index
    if kind == "ivfpq":  # (faiss's python wrappers keep the quantizer alive as a reference of its owner)
        index = faiss.IndexIVFPQ(faiss.IndexFlatIP(dim), dim, int(params["nlist"]), int(params["pq_m"]),
                                 int(params["nbits"]), faiss.METRIC_INNER_PRODUCT)
        index.nprobe = int(params["nprobe"])
        return index
    return faiss.IndexFlatIP(dim)


def search_parameters(index, params: dict[str, Any], k: int, selector=None):
    """FAISS search parameters with the query-time knobs of ``params`` (efSearch, nprobe), restricted
    to ``selector``'s ids when given (a parameters object replaces the index's own knobs)."""
    if isinstance(index, faiss.IndexHNSW):
        out = faiss.SearchParametersHNSW()
        out.efSearch = max(int(params.get("ef_search", 128)), k)
    elif isinstance(index, faiss.IndexIVF):
        out = faiss.SearchParametersIVF()
        out.nprobe = int(params.get("nprobe", 32))
    else:
        out = faiss.SearchParameters()
    out.sel = selector
    return out
