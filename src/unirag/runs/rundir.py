"""The run directory of caption and image runs, written and read here only: outputs, manifest, prompts.

    OUT/outputs.jsonl   one line per query (ResultStore keyed by qid; compacted at the end)
    OUT/manifest.json   task, generator config (no secrets), mode, k, sources, seed, template
                        hashes, package versions, counts, cost
    OUT/prompts/        the first N rendered prompts (text, image list, merged images as PNG)

Rerunning into the same directory resumes: queries whose latest record is ``ok`` are skipped,
failed ones are tried again. The manifest's ``identity`` (what determines the outputs) must match
the earlier run's, so a resume never mixes two configurations in one file.

Two processes may run the same configuration into one directory at once (e.g. two workers on a
grid): the manifest is checked and written under the result store's exclusive lock, each process
skips queries the other has finished (see :class:`~unirag.runs.store.ResultStore`), and the final
compaction merges both, so nothing is lost or stored twice.

Reading (:func:`read_run_dir`) never opens ``outputs.jsonl`` for writing nor takes the store's lock:
evaluation may run while the generation run is still appending, so an unfinished last line is
ignored and, as in the store, the latest line per ``qid`` wins. Scorers write ``metrics.json`` and
``metrics_per_query.jsonl`` beside the outputs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from unirag.data.images import png_bytes
from unirag.data.jsonl import iter_json_lines, parse_json, read_json_file
from unirag.data.text import decode_line
from unirag.errors import ConfigError, InputError, RunFailedError, existing_path
from unirag.messages import Message, render_for_log
from unirag.runs.atomic import atomic_write_bytes, atomic_write_json, atomic_write_text
from unirag.runs.store import STATUS_OK, ResultStore

OUTPUTS_FILE = "outputs.jsonl"
MANIFEST_FILE = "manifest.json"
METRICS_FILE = "metrics.json"
PER_QUERY_FILE = "metrics_per_query.jsonl"
PROMPTS_DIR = "prompts"
# task names the generation commands write into manifest.json -> the evaluation kind
TASK_ALIASES = {"caption": "caption", "captions": "caption", "image": "image", "images": "image",
                "generate-images": "image", "image-generation": "image"}
PACKAGES = ("unirag", "numpy", "pillow", "torch", "transformers", "openai", "google-genai", "diffusers",
            "faiss-cpu", "sentence-transformers")


def package_versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[name] = metadata.version(name)
    return out


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class RunDir:
    """Open with ``with RunDir(out, task, identity, settings) as run:``."""

    def __init__(self, out: str | Path, task: str, identity: dict[str, Any],
                 settings: dict[str, Any] | None = None) -> None:
        self.out = Path(out)
        self.task = task
        self.identity = json.loads(json.dumps(identity, default=str))  # normalise (paths -> str)
        self.settings = json.loads(json.dumps(settings or {}, default=str))
        self.manifest_path = self.out / MANIFEST_FILE
        self.store: ResultStore | None = None
        self.manifest: dict[str, Any] = {}

    def __enter__(self) -> RunDir:
        self.out.mkdir(parents=True, exist_ok=True)
        self.store = ResultStore(self.out / OUTPUTS_FILE, key="qid")
        try:
            with self.store.exclusive():  # no other process reads or writes the manifest meanwhile
                self._open_manifest()
        except BaseException:
            self.store.close()
            self.store = None
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.store is None:
            return
        try:
            if exc_type is not None and self.manifest.get("status") == "running":
                # Ctrl-C or a crash: say so, so nobody scores a half-finished run by mistake.
                with self.store.exclusive():
                    self.manifest.update({"status": "interrupted", "updated": _now()})
                    atomic_write_json(self.manifest_path, self.manifest)
        finally:
            self.store.close()

    def _open_manifest(self) -> None:
        try:
            old = read_run_manifest(self.out) if self.manifest_path.exists() else None
        except InputError as e:  # not JSON, or not an object
            raise ConfigError(f"{e}; move it away to start afresh") from None
        if old is not None:
            if old.get("task") != self.task:
                raise ConfigError(f"{self.out} holds a '{old.get('task')}' run, not '{self.task}'; choose another --out")
            was, now = old.get("identity", {}), self.identity
            diff = [f"{key}: {was.get(key)!r} -> {now.get(key)!r}" for key in sorted(set(was) | set(now))
                    if was.get(key) != now.get(key)]
            if diff:
                raise ConfigError(f"{self.out} holds a run with a different configuration ({'; '.join(diff)}); "
                                  "rerun with the same options to resume, or choose another --out")
        self.manifest = {
            "task": self.task,
            "created": old.get("created") if old else _now(),
            "updated": _now(),
            "status": "running",
            "identity": self.identity,
            "settings": self.settings,
            "packages": package_versions(),
            "counts": old.get("counts", {}) if old else {},
            "resumed": bool(old),
        }
        atomic_write_json(self.manifest_path, self.manifest)

    def finish(self, order: list[str], extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """Compact outputs to one line per qid in query order; record counts and totals in the manifest."""
        assert self.store is not None
        with self.store.exclusive():  # includes what another process sharing the directory wrote
            # Records of queries outside this run (an earlier run without --limit) are kept, after these.
            self.store.compact([q for q in order if self.store.get(q) is not None])
            records = [r for r in map(self.store.get, order) if r is not None]
            done = [r for r in records if r.get("status") == STATUS_OK]
            ok, failed = len(done), len(records) - len(done)
            counts = {"queries": len(order), "ok": ok, "error": failed, "missing": len(order) - ok - failed}
            examples = self.identity.get("examples")
            k = examples.get("k") if isinstance(examples, dict) else None
            if isinstance(k, int) and k >= 1:  # finished queries given fewer examples than k: never silent
                short = sum(1 for r in done if isinstance(r.get("examples"), list) and len(r["examples"]) < k)
                if short:  # (as `unirag retrieve` says)
                    counts["short"] = short
            usage: Counter[str] = Counter()
            for r in done:
                usage.update({k: int(v or 0) for k, v in (r.get("usage") or {}).items()})
            costs = [r.get("cost_usd") for r in done]  # one unpriced record: no total
            totals = {"usage": dict(usage),
                      "cost_usd": round(sum(map(float, costs), 0.0), 6) if None not in costs else None,
                      "latency_s": round(sum((float(r.get("latency_s") or 0.0) for r in done), 0.0), 3)}
            self.manifest.update({"updated": _now(), "counts": counts, "totals": totals,
                                  "status": "complete" if ok == len(order) else "incomplete", **(extra or {})})
            if self.store.dropped_lines:  # lines a crashed writer left unreadable (also logged as a warning)
                self.manifest["dropped_lines"] = {"count": len(self.store.dropped_lines),
                                                  "first_line_numbers": self.store.dropped_lines[:10]}
            atomic_write_json(self.manifest_path, self.manifest)
        return counts


def write_prompt(prompts_dir: Path, index: int, qid: str, messages: list[Message], merged_image=None,
                 extra: dict[str, Any] | None = None, sent: str | None = None) -> None:
    """Write one rendered prompt into ``prompts_dir`` (text, image list, merged image as PNG)."""
    stem = Path(prompts_dir) / f"{index:03d}_{re.sub(r'[^A-Za-z0-9._-]+', '_', str(qid))[:80]}"
    images = [{"label": p.label, "path": str(p.path) if p.path is not None else None,
               "sha256": hashlib.sha256(p.encoded()[0]).hexdigest()} for m in messages for p in m.images]
    info = {"qid": qid, "images": images, **(extra or {})}
    if merged_image is not None:
        atomic_write_bytes(stem.with_name(stem.name + "_merged.png"), png_bytes(merged_image))
        info["merged_image"] = stem.name + "_merged.png"
    atomic_write_text(stem.with_suffix(".txt"), render_for_log(messages) + "\n")
    if sent is not None:  # exactly as sent (the official scripts' prompt_{idx}.txt), to diff against theirs
        atomic_write_text(stem.with_name(stem.name + ".sent.txt"), sent)
    atomic_write_json(stem.with_suffix(".json"), info)


def check_some_succeeded(run_dir: str | Path, ok: int, failed: int) -> None:
    """Raise :class:`~unirag.errors.RunFailedError` (one line: the count and the first recorded error,
    already masked) when this run tried items and every one of them failed - a wrong key or an
    unreachable server must not end in exit status 0. Failures stay recorded; a rerun retries them."""
    if failed < 1 or ok > 0:
        return
    first = next(iter(read_run_dir(run_dir).failed().values()), {})
    error = " ".join(str(first.get("error") or "no error recorded").split())
    raise RunFailedError(f"all {failed} queries tried in this run failed (first error: {error[:300]}); "
                         f"they are recorded in {Path(run_dir) / OUTPUTS_FILE}, rerun the same command to retry them")


# -- reading ----------------------------------------------------------------------------------
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


def read_run_manifest(run_dir: str | Path) -> dict[str, Any]:
    """The run's ``manifest.json`` ({} when there is none: a hand-made run)."""
    path = Path(run_dir) / MANIFEST_FILE
    if not path.exists():
        return {}
    data = read_json_file(path)
    if not isinstance(data, dict):
        raise InputError("expected a JSON object", path=path)
    return data


def read_run_dir(run_dir: str | Path) -> RunOutputs:
    """Load a run directory; a missing directory or ``outputs.jsonl`` is an :class:`InputError`."""
    run_dir = existing_path(run_dir, "run directory", folder=True)
    path = run_dir / OUTPUTS_FILE
    if not path.exists():
        raise InputError(f"no {OUTPUTS_FILE} in the run directory (is this a caption/image run?)", path=path)
    run = RunOutputs(run_dir=run_dir, manifest=read_run_manifest(run_dir))
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            if not raw.endswith(b"\n"):
                try:
                    json.loads(raw)
                except (ValueError, RecursionError):
                    break  # the writer is still appending (or crashed mid-line): not a result yet
            rec = parse_json(decode_line(raw, path, lineno, line_start=None), path, lineno)
            if not isinstance(rec, dict) or "qid" not in rec:
                raise InputError("expected a JSON object with a 'qid'", path=path, line=lineno, field="qid")
            qid = str(rec["qid"])
            run.records[qid] = rec
            run.lines[qid] = lineno
    return run


def read_per_query(run_dir: str | Path) -> dict[str, dict[str, Any]]:
    """qid -> per-query scores written by a scorer ({} before evaluation)."""
    path = Path(run_dir) / PER_QUERY_FILE
    return {str(rec.get("qid")): rec for _, rec in iter_json_lines(path)} if path.exists() else {}
