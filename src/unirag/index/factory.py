"""FAISS index types offered by ``--index-type`` and their default parameters.

* ``flat``  - exact inner product (``IndexFlatIP``); vectors are L2-normalised so this is cosine.
* ``hnsw``  - graph search (``IndexHNSWFlat``, inner product); no training, builds incrementally.
* ``ivfpq`` - inverted lists + product quantisation for pools of millions (M-BEIR's global pool is
  5.6M); trained on a bounded sample, and by default wrapped in ``IndexRefineFlat`` so that the
  shortlist found with compressed codes is re-scored exactly (recall close to exact search).
"""

from __future__ import annotations

import math
from typing import Any

from unirag.errors import ConfigError

INDEX_TYPES = ("flat", "hnsw", "ivfpq")

DEFAULT_PARAMS: dict[str, dict[str, Any]] = {
    "flat": {},
    "hnsw": {"M": 32, "ef_construction": 80, "ef_search": 128},
    # nlist=None: 4*sqrt(n) rounded to a power of two, chosen once the count is known.
    "ivfpq": {"nlist": None, "pq_m": None, "nbits": 8, "nprobe": 32, "train_size": 131072,
              "refine": True, "refine_k_factor": 8},
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
    return params


def ivfpq_shape(n: int, dim: int, params: dict[str, Any]) -> dict[str, Any]:
    """Concrete nlist / pq_m for ``n`` vectors of size ``dim``."""
    # at least ~32 training points per list (k-means quality), and never more lists than n / 39
    auto = min(2 ** round(math.log2(max(1.0, 4 * math.sqrt(n)))), int(params["train_size"]) // 32)
    nlist = int(max(1, min(params["nlist"] or auto, n // 39)))
    pq_m = params["pq_m"]
    if pq_m is None:  # ~8 dimensions per sub-quantiser, a divisor of dim
        pq_m = max(m for m in range(1, dim + 1) if dim % m == 0 and m <= max(1, dim // 8))
    if dim % pq_m:
        raise ConfigError(f"pq_m={pq_m} must divide the vector size {dim}")
    return {**params, "nlist": nlist, "pq_m": int(pq_m)}


def new_flat(dim: int):
    import faiss

    return faiss.IndexFlatIP(dim)


def new_hnsw(dim: int, params: dict[str, Any]):
    import faiss

    index = faiss.IndexHNSWFlat(dim, int(params["M"]), faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = int(params["ef_construction"])
    index.hnsw.efSearch = int(params["ef_search"])
    return index


def new_ivfpq(dim: int, params: dict[str, Any]):
    """An untrained IVF-PQ (optionally refined) index; the caller trains it on a sample."""
    import faiss

    quantizer = faiss.IndexFlatIP(dim)
    ivf = faiss.IndexIVFPQ(quantizer, dim, int(params["nlist"]), int(params["pq_m"]), int(params["nbits"]),
                           faiss.METRIC_INNER_PRODUCT)
    ivf.nprobe = int(params["nprobe"])
    if not params["refine"]:
        return ivf, ivf
    refined = faiss.IndexRefineFlat(ivf)
    refined.k_factor = float(params["refine_k_factor"])
    # (faiss's python wrappers keep ``quantizer`` and ``ivf`` alive as references of their owners)
    return refined, ivf


def apply_search_params(index, params: dict[str, Any], k: int) -> None:
    """Set query-time knobs (efSearch, nprobe, k_factor) on a loaded index."""
    import faiss

    if isinstance(index, faiss.IndexHNSW):
        index.hnsw.efSearch = max(int(params.get("ef_search", 128)), k)
        return
    base = index
    if isinstance(index, faiss.IndexRefine):
        index.k_factor = float(params.get("refine_k_factor", 8))
        base = faiss.downcast_index(index.base_index)
    if isinstance(base, faiss.IndexIVF):
        base.nprobe = int(params.get("nprobe", 32))
