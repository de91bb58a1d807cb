"""Retrieval run files (what `unirag retrieve` writes): one JSON line per query and a TREC twin.

JSONL line: ``{"qid", "candidates": [{"did", "score", "modality"[, "replaced"]}],
"pairs": [{"image_did", "text_did", "img_path", "txt", "score", "via"[, "near_duplicate"]}], "raw": [did, ...]
[, "near_duplicates": {"flagged", "excluded"}]}`` (``raw``: the first k hits before the wrong-modality
replacement, for UniIR's Recall@k); beside it ``<run>.manifest.json`` (k, modality, index, profile,
example selection).
TREC line: ``qid Q0 did rank score unirag`` (rank from 1), readable by trec_eval / ranx.
Both are written atomically (temp file + rename). A non-finite score (``Infinity``/``NaN`` is not
JSON; it comes from a damaged index) stops the write with one error and leaves no file behind.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from unirag.data.jsonl import iter_json_lines
from unirag.errors import InputError, UniragError
from unirag.retrieval.results import Hits
from unirag.runs.atomic import atomic_write_json, atomic_write_lines


def trec_path(run_path: str | Path, ext: str = ".trec") -> Path:
    """The file beside a run file: its TREC twin (``run.jsonl`` -> ``run.trec``), or with
    ``ext=".manifest.json"`` its manifest (k, modality, selection)."""
    run_path = Path(run_path)
    return run_path.with_name((run_path.stem if run_path.suffix == ".jsonl" else run_path.name) + ext)


def read_run_manifest(run_path: str | Path) -> dict | None:
    """The manifest beside a retrieval run file, or None (runs written before manifests existed)."""
    try:
        return json.loads(trec_path(run_path, ".manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # missing, unreadable, not UTF-8, not JSON, nested too deep
        return None


def write_retrieval_run(path: str | Path, results: Iterable[Hits], manifest: dict | None = None
                        ) -> tuple[Path, Path]:
    """Write ``path`` (JSONL) and its TREC twin (and ``manifest`` beside them); returns both paths."""
    results = list(results)
    path = Path(path)
    if manifest is not None:
        atomic_write_json(trec_path(path, ".manifest.json"), manifest)
    atomic_write_lines(path, (_json_line(r, path) for r in results))
    trec = trec_path(path)
    atomic_write_lines(trec, (f"{r.qid} Q0 {c.did} {rank} {c.score:.6f} unirag"
                              for r in results for rank, c in enumerate(r, start=1)))
    return path, trec


def _json_line(result: Hits, path: Path) -> str:
    try:
        return json.dumps(result.to_json(), ensure_ascii=False, allow_nan=False)
    except ValueError:  # allow_nan=False: a score of inf or nan
        raise UniragError(f"{path}: query {result.qid!r} has a non-finite score, which is not valid JSON; the "
                          "index it came from is damaged: run 'unirag index verify' on it, then rebuild") from None


def read_retrieval_run(path: str | Path) -> dict[str, Hits]:
    """qid -> :class:`~unirag.Hits` from a JSONL run file; errors name the file, line and field."""
    path = Path(path)
    out: dict[str, Hits] = {}
    for lineno, obj in iter_json_lines(path, what="run file"):
        if "qid" not in obj:
            raise InputError("missing required field", path=path, line=lineno, field="qid")
        try:
            result = Hits.from_json(obj)
        except (KeyError, TypeError, ValueError) as e:
            field = e.args[0] if isinstance(e, KeyError) else "candidates"
            raise InputError(f"malformed run record ({e.__class__.__name__}: {e})", path=path, line=lineno,
                             field=str(field)) from None
        if result.qid in out:
            raise InputError(f"duplicate qid {result.qid!r}", path=path, line=lineno, field="qid")
        out[result.qid] = result
    return out
