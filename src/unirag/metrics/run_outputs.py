"""Read a generation run directory (``outputs.jsonl`` + ``manifest.json``) without modifying it.

Evaluation may run while the generation run is still appending, so this reader never opens the
file for writing nor takes the store's lock (``ResultStore`` repairs a crashed writer's last line
under its lock): an unfinished last line is simply ignored, and, as in the store, the latest line
per ``qid`` wins.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unirag.data.records import Candidate, Query
from unirag.errors import InputError
from unirag.metrics.references import load_ground_truth

OUTPUTS_FILE = "outputs.jsonl"
MANIFEST_FILE = "manifest.json"
METRICS_FILE = "metrics.json"
PER_QUERY_FILE = "metrics_per_query.jsonl"
# task names the generation commands write into manifest.json -> the evaluation kind
TASK_ALIASES = {"caption": "caption", "captions": "caption", "image": "image", "images": "image",
                "generate-images": "image", "image-generation": "image"}


@dataclass
class RunOutputs:
    """One run: its manifest, the latest record per qid, and the line each record came from."""

    run_dir: Path
    manifest: dict[str, Any]
    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)

    @property
    def task(self) -> str | None:
        """The evaluation kind ("caption" or "image"), or None when the manifest does not say (hand-made runs)."""
        task = self.manifest.get("task")
        return TASK_ALIASES.get(str(task), str(task)) if task is not None else None

    def ok(self) -> dict[str, dict[str, Any]]:
        return {q: r for q, r in self.records.items() if r.get("status", "ok") == "ok"}

    def failed(self) -> dict[str, dict[str, Any]]:
        return {q: r for q, r in self.records.items() if r.get("status", "ok") != "ok"}


def read_manifest(run_dir: str | Path) -> dict[str, Any]:
    path = Path(run_dir) / MANIFEST_FILE
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise InputError(f"malformed JSON ({e.msg} at line {e.lineno})", path=path) from None
    if not isinstance(data, dict):
        raise InputError("expected a JSON object", path=path)
    return data


def read_run(run_dir: str | Path) -> RunOutputs:
    """Load a run directory; a missing directory or ``outputs.jsonl`` is an :class:`InputError`."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise InputError("run directory not found", path=run_dir)
    path = run_dir / OUTPUTS_FILE
    if not path.exists():
        raise InputError(f"no {OUTPUTS_FILE} in the run directory (is this a caption/image run?)", path=path)
    run = RunOutputs(run_dir=run_dir, manifest=read_manifest(run_dir))
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw)
            except json.JSONDecodeError:
                if not raw.endswith(b"\n"):
                    break  # the writer is still appending (or crashed mid-line): not a result yet
                raise InputError("malformed JSON line", path=path, line=lineno) from None
            if not isinstance(rec, dict) or "qid" not in rec:
                raise InputError("expected a JSON object with a 'qid'", path=path, line=lineno, field="qid")
            qid = str(rec["qid"])
            run.records[qid] = rec
            run.lines[qid] = lineno
    return run


# the evaluation kind a scorer expects -> what to tell a user who passed the other kind of run
_WRONG_TASK = {"caption": "this is an image-generation run; use 'unirag evaluate images'",
               "image": "this is a caption run; use 'unirag evaluate captions'"}


def load_run_for_scoring(run_dir: str | Path, task: str, queries: str | Path, pool: str | Path,
                         qrels: str | Path | None = None
                         ) -> tuple[RunOutputs, dict[str, Query], dict[str, list[Candidate]]]:
    """The run, qid -> query and qid -> positive candidates, checked for the scorer of ``task``.

    Caption and image scoring both refuse a run of the other kind and outputs whose qids are not
    in ``queries`` (a wrong --queries file would otherwise score silently against nothing), so the
    checks live here once. A run whose manifest names no task (hand-made) is accepted.
    """
    run = read_run(run_dir)
    if run.task not in (None, task):
        raise InputError(_WRONG_TASK[task], path=run.run_dir)
    by_qid, gt = load_ground_truth(queries, pool, qrels)
    unknown = [q for q in run.records if q not in by_qid]
    if unknown:
        raise InputError(f"{len(unknown)} output(s) have qids not in the queries file, e.g. {unknown[0]!r} "
                         "(wrong --queries?)", path=queries)
    return run, by_qid, gt


def read_metrics(run_dir: str | Path) -> dict[str, Any] | None:
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise InputError(f"malformed JSON ({e.msg})", path=path) from None


def read_per_query(run_dir: str | Path) -> dict[str, dict[str, Any]]:
    path = Path(run_dir) / PER_QUERY_FILE
    out: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return out
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if line.strip():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    raise InputError("malformed JSON line", path=path, line=lineno) from None
                out[str(rec.get("qid"))] = rec
    return out
