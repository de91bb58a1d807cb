"""Read and write M-BEIR JSONL (queries, candidate pool) and qrels files.

M-BEIR (UniIR, Wei et al. 2023) is the interchange format for every stage: importers write it,
the index and retrieval read it. Errors name the file, the line and the field.

Pairing: a pool records which image and caption belong together by a shared ``source_id`` inside
the JSON string ``src_content`` (``{"source_id": "397133", ...}``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from unirag.data.jsonl import iter_json_lines
from unirag.data.records import Candidate, Modality, Qrels, Query
from unirag.data.text import iter_text_lines
from unirag.errors import InputError, existing_path
from unirag.runs.atomic import atomic_write_lines


def _req(obj: dict, key: str, path: Path, lineno: int) -> Any:
    if key not in obj or obj[key] is None:
        raise InputError("missing required field", path=path, line=lineno, field=key)
    return obj[key]


def _content(obj: dict, prefix: str, path: Path | None, lineno: int | None
             ) -> tuple[Modality, str | None, str | None, str | None]:
    """(modality, txt, img_path, src_content) of a pool line (``prefix`` "") or a query line ("query_"),
    checked: the text and image path the modality names are there; ``src_content`` as a JSON string."""
    try:
        modality = Modality.parse(_req(obj, f"{prefix}modality", path, lineno))
    except ValueError as e:
        raise InputError(str(e), path=path, line=lineno, field=f"{prefix}modality") from None
    txt, img = obj.get(f"{prefix}txt"), obj.get(f"{prefix}img_path")
    for key, v in ((f"{prefix}txt", txt), (f"{prefix}img_path", img)):
        if v is not None and not isinstance(v, str):
            raise InputError(f"expected a string or null, got {type(v).__name__}", path=path, line=lineno,
                             field=key)
    if modality.has_text and not txt:
        raise InputError(f"modality '{modality.value}' needs a text", path=path, line=lineno, field=f"{prefix}txt")
    if modality.has_image and not img:
        raise InputError(f"modality '{modality.value}' needs an image path", path=path, line=lineno,
                         field=f"{prefix}img_path")
    src = obj.get(f"{prefix}src_content")
    return modality, txt, img, src if (src is None or isinstance(src, str)) else json.dumps(src)


def _src_object(src_content: str | None) -> dict[str, Any]:
    """A candidate's ``src_content`` as a JSON object: {} when empty, ``{"original": ...}`` around anything
    else (a JSON value that is not an object, or text that is not JSON)."""
    if not src_content:
        return {}
    try:
        data = json.loads(src_content)
    except (json.JSONDecodeError, TypeError, RecursionError):
        return {"original": src_content}
    return data if isinstance(data, dict) else {"original": data}


def source_id_of(src_content: str | None) -> str | None:
    """The ``source_id`` recorded in a candidate's ``src_content`` JSON (the pool's pairing), if any."""
    sid = _src_object(src_content).get("source_id")
    return str(sid) if sid is not None else None


def _did_list(obj: dict, key: str, path: Path, lineno: int) -> list[str]:
    v = obj.get(key) or []
    if not isinstance(v, list):
        raise InputError("expected a list of dids", path=path, line=lineno, field=key)
    return [str(x) for x in v]


def read_candidates(path: str | Path) -> Iterator[Candidate]:
    """Stream candidates from an M-BEIR pool JSONL file (one line at a time, memory bounded)."""
    return (c for _, c in read_numbered_candidates(path))


def read_numbered_candidates(path: str | Path) -> Iterator[tuple[int, Candidate]]:
    """``(line number, candidate)`` of an M-BEIR pool file, for messages that name the line."""
    path = Path(path)
    for lineno, obj in iter_json_lines(path):
        yield lineno, parse_candidate(obj, path, lineno)


def duplicate_did(did: str, line: int | None, first: int | None, path: str | Path | None) -> InputError:
    """The error for a did seen twice in a pool, naming both lines when they are known."""
    where = f" (first at line {first})" if first is not None else ""
    return InputError(f"duplicate did {did!r} in the candidate pool{where}", path=path, line=line, field="did")


def parse_candidate(obj: dict, path: Path | None, lineno: int | None) -> Candidate:
    """One pool line (already JSON-decoded) as a :class:`Candidate`; errors name ``path:lineno``."""
    modality, txt, img, src = _content(obj, "", path, lineno)
    return Candidate(did=str(_req(obj, "did", path, lineno)), modality=modality, txt=txt, img_path=img,
                     src_content=src, source_id=source_id_of(src))


def read_queries(path: str | Path) -> list[Query]:
    path = Path(path)
    out: dict[str, Query] = {}
    for lineno, obj in iter_json_lines(path):
        qid = str(_req(obj, "qid", path, lineno))
        if qid in out:
            raise InputError(f"duplicate qid {qid!r}", path=path, line=lineno, field="qid")
        modality, txt, img, src = _content(obj, "query_", path, lineno)
        task = obj.get("task_id")
        if task is not None and not isinstance(task, int):
            raise InputError("expected an integer", path=path, line=lineno, field="task_id")
        out[qid] = Query(qid=qid, modality=modality, txt=txt, img_path=img, src_content=src,
                         pos_cand_list=_did_list(obj, "pos_cand_list", path, lineno),
                         neg_cand_list=_did_list(obj, "neg_cand_list", path, lineno), task_id=task)
    return list(out.values())


def read_qrels(path: str | Path) -> Qrels:
    """Read ``qid 0 did relevance [task_id]`` lines; relevance <= 0 lines are ignored."""
    path = existing_path(path)
    qrels = Qrels()
    for lineno, line in iter_text_lines(path):
        parts = line.split()
        if not parts:
            continue
        if len(parts) not in (4, 5):
            raise InputError(f"expected 'qid 0 did relevance [task_id]', got {len(parts)} columns",
                             path=path, line=lineno)
        try:
            rel = int(parts[3])
            task = int(parts[4]) if len(parts) == 5 else None
        except ValueError:
            raise InputError("relevance and task_id must be integers", path=path, line=lineno) from None
        if rel > 0:
            qrels.add(parts[0], parts[2], task)
    return qrels


def candidate_to_json(c: Candidate) -> dict[str, Any]:
    src = c.src_content
    if c.source_id is not None and source_id_of(src) != c.source_id:
        src = json.dumps({**_src_object(src), "source_id": c.source_id})
    return {"did": c.did, "txt": c.txt, "img_path": c.img_path, "modality": c.modality.value, "src_content": src}


def query_to_json(q: Query) -> dict[str, Any]:
    return {"qid": q.qid, "query_txt": q.txt, "query_img_path": q.img_path, "query_modality": q.modality.value,
            "query_src_content": q.src_content, "pos_cand_list": q.pos_cand_list,
            "neg_cand_list": q.neg_cand_list, "task_id": q.task_id}


def write_candidates(path: str | Path, candidates: Iterable[Candidate]) -> int:
    return atomic_write_lines(path, (json.dumps(candidate_to_json(c), ensure_ascii=False) for c in candidates))


def write_queries(path: str | Path, queries: Iterable[Query]) -> int:
    return atomic_write_lines(path, (json.dumps(query_to_json(q), ensure_ascii=False) for q in queries))


def write_qrels(path: str | Path, queries: Iterable[Query]) -> int:
    return atomic_write_lines(path, (f"{q.qid} 0 {did} 1" + (f" {q.task_id}" if q.task_id is not None else "")
                                     for q in queries for did in q.pos_cand_list))


def load_pool(path: str | Path) -> dict[str, Candidate]:
    """The whole pool as did -> Candidate (for lookups; the index build streams instead)."""
    return {c.did: c for c in read_candidates(path)}
