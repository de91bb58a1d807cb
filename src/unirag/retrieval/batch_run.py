"""Retrieve for a file of M-BEIR queries and write the run file (what ``unirag retrieve`` does).

The CLI parses options and prints :class:`RetrievalRunSummary`; everything between (the encoder the
index records, UniIR query instructions, positives to exclude, the run and TREC files) is here, so
a notebook gets the same run with one call.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unirag.retrieval.results import Hits


@dataclass
class RetrievalRunSummary:
    """What a retrieval run produced: the results (in query order) and the two files written."""

    results: list[Hits]
    run_path: Path
    trec_path: Path
    k: int
    #: the leakage guard's totals (see :func:`run_retrieval`)
    leaks: dict[str, float | int] | None = None

    @property
    def short(self) -> int:
        """Queries that got fewer than ``k`` pairs (the index ran out after the exclusion rules)."""
        return sum(1 for r in self.results if len(r.pairs) < self.k)

    @property
    def replaced(self) -> int:
        """Wrong-modality candidates replaced by their complement."""
        return sum(1 for r in self.results for c in r if c.replaced)


def run_retrieval(index_dir: str | Path, queries: str | Path, out: str | Path, *, k: int = 5,
                  modality: str = "any", exclude_positives: str | Path | None = None,
                  query_images_root: str | Path | None = None, encoder: str | None = None,
                  pool_images_root: str | Path | None = None, verify: bool = False, device: str | None = "auto",
                  dtype: str | None = "auto", instructions: str | None = None, use_instructions: bool = True,
                  progress: bool = False, profile=None, selection=None, index_memory: str = "mmap",
                  engine: Any = None) -> RetrievalRunSummary:
    """Top-``k`` candidates and pairs for every query of the M-BEIR ``queries`` file, written to ``out``
    (JSONL) and its TREC twin. ``exclude_positives``: a qrels file whose positives are dropped from each
    query's results (leakage-free evaluation). ``profile``: a profile name or
    :class:`unirag.profiles.Settings` (pair completion, example pairs); ``selection``: how pairs become
    examples (:class:`unirag.Selection`); both are recorded with the run's options in
    ``<out>.manifest.json``. ``index_memory``: "mmap" or "ram" (see :meth:`unirag.Index.open`).
    The query encoder: ``encoder`` (a spec) or the one the index's manifest records, loaded with
    ``device``, ``dtype`` and ``engine``'s decode workers (see :func:`unirag.load_encoder`); a UniIR
    encoder gets the M-BEIR ``instructions`` file, else the ``instructions/query_instructions.tsv``
    found above the ``queries`` file (``use_instructions=False``: none). Options fail before any model
    loads."""
    from unirag.index.store import check_memory_mode

    check_memory_mode(index_memory)
    from unirag.data.mbeir import read_qrels, read_queries
    from unirag.retrieval.retriever import Retriever, check_options
    from unirag.retrieval.run_io import write_retrieval_run

    _, sel = check_options(k, modality, selection)
    query_list = read_queries(queries)
    qrels = read_qrels(exclude_positives) if exclude_positives is not None else None
    from unirag.encoders.instructions import find_instructions
    from unirag.encoders.registry import is_uniir_spec, load_encoder, precision_options
    from unirag.index.manifest import read_manifest

    spec = encoder if encoder is not None else read_manifest(index_dir)["encoder"].get("spec")
    from unirag.runs.engine import engine_options

    uniir = is_uniir_spec(spec)
    found = (instructions or find_instructions(str(queries))) if uniir and use_instructions else None
    query_encoder = load_encoder(spec, device=device, decode_workers=engine_options(engine).decode_workers,
                                 **precision_options(spec, dtype, profile), instructions=str(found) if found else None,
                                 use_instructions=False if uniir and not use_instructions else None)
    retriever = Retriever(index_dir, query_encoder, verify=verify, pool_images_root=pool_images_root,
                          profile=profile, memory=index_memory)
    results = retriever.retrieve(query_list, k, modality, exclude_qrels=qrels, query_images_root=query_images_root,
                                 progress=progress, selection=sel)
    # the leakage guard's totals: queries, examples flagged, excluded, and the leak rate (share of queries whose
    # examples still show a flagged near-duplicate); None: guard off
    counts = [r.near_duplicates for r in results if r.near_duplicates is not None]
    leaking = sum(1 for r in results if any(p.near_duplicate for p in r.pairs))
    leaks = {"queries": len(counts), "flagged": sum(c.get("flagged", 0) for c in counts),
             "excluded": sum(c.get("excluded", 0) for c in counts),
             "leak_rate": round(leaking / len(counts), 6)} if counts else None
    manifest = {"task": "retrieve", "index": str(Path(index_dir).absolute()),
                "queries": str(Path(queries).absolute()), "k": k, "modality": modality,
                "exclude_positives": str(exclude_positives) if exclude_positives else None,
                "encoder": query_encoder.config() if hasattr(query_encoder, "config") else None,
                "profile": retriever.settings.to_dict(), "selection": sel.to_dict(),
                "near_duplicates": leaks}
    run_path, trec = write_retrieval_run(out, results, manifest=manifest)
    return RetrievalRunSummary(results, run_path, trec, k, leaks)
