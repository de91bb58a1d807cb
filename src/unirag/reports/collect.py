"""Turn run directories into table rows: who generated (generator, mode, k, retriever) and the metrics,
read from each run's ``manifest.json`` and ``metrics.json``, labelled as the paper's tables do
("CLIP-SF", "LLaVA", "<retriever> + <generator>", "Random + <generator>").
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unirag.data.jsonl import read_json_file
from unirag.errors import InputError, existing_path
from unirag.runs.rundir import METRICS_FILE, TASK_ALIASES, read_run_dir, read_run_manifest

MODE_ORDER = {"retrieval": 0, "zero-shot": 1, "rag": 2, "random": 3}


@dataclass
class RunSummary:
    run_dir: Path
    task: str
    dataset: str
    generator: str
    mode: str
    retriever: str | None
    k: int
    metrics: dict[str, float] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    manifest: dict[str, Any] = field(default_factory=dict)
    evaluation: dict[str, Any] = field(default_factory=dict)
    #: the paper's figures for this run (metric -> value), from a reproduction grid's ``paper.json``
    paper: dict[str, float] = field(default_factory=dict)
    #: share of queries whose examples showed a near-duplicate of the query (None: the run's
    #: leakage guard was off, or the run predates it); see :class:`unirag.Selection`.
    leak_rate: float | None = None

    @property
    def name(self) -> str:
        return self.run_dir.name

    @property
    def label(self) -> str:
        """Row label in the paper's style."""
        if self.mode == "retrieval":  # the generator is named: top-1 and consensus rows differ by it alone
            variant = self.generator.split(":", 1)[-1]
            return f"{self.retriever or 'retrieval'} ({variant})"
        if self.mode == "zero-shot" or self.k == 0:
            return self.generator
        return self.series if self.mode == "random" else f"{self.retriever or 'RAG'} + {self.generator}"

    @property
    def selection(self) -> str:
        """How the run's examples were chosen, from its manifest: "random (seed 0)", "relevance",
        "mmr λ=0.7, one per image, near-duplicates excluded, where gender=Men"; "" without examples."""
        if self.k == 0 or self.mode == "zero-shot":
            return ""
        if self.mode == "random":
            seed = self.manifest.get("seed")
            return "random" + (f" (seed {seed})" if seed is not None else "")
        sel = self.manifest.get("selection")
        if not isinstance(sel, dict):
            return "relevance"
        parts = [f"mmr λ={sel.get('mmr_lambda')}" if sel.get("diversity") == "mmr" else "relevance"]
        parts += [text for text, on in (("one per image", sel.get("one_per_image")),
                                        ("near-duplicates excluded", sel.get("near_duplicates") == "exclude"),
                                        ("pairs from qrels", sel.get("pairs_from"))) if on]
        where = sel.get("where") or {}
        if isinstance(where, dict) and where:
            parts.append("where " + " ".join(f"{f}={','.join(map(str, v))}" for f, v in where.items()))
        return ", ".join(parts)

    @property
    def series(self) -> str:
        """Line label in plots: the generator and where its examples came from."""
        if self.mode == "retrieval":
            return f"{self.label} (retrieval only)"
        if self.mode == "random":
            return f"Random + {self.generator}"
        return f"{self.retriever or 'RAG'} + {self.generator}" if self.mode == "rag" else self.generator

    def recorded_path(self, *keys: str, evaluation_first: bool = False) -> Path | None:
        """The first path recorded under ``keys`` (in the manifest, then metrics.json, or the other way
        round) that exists as given or relative to the run directory."""
        sources = (self.evaluation, self.manifest) if evaluation_first else (self.manifest, self.evaluation)
        return next((p for source in sources for key in keys if source.get(key)
                     for p in (Path(str(source[key])), self.run_dir / str(source[key])) if p.exists()), None)

    def sort_key(self) -> tuple:
        return (0 if self.mode == "retrieval" else 1, "" if self.mode == "retrieval" else self.generator,
                0 if self.k == 0 else MODE_ORDER.get(self.mode, 9), self.retriever or "", self.k, self.name)


def _short(spec: str) -> str:
    """'hf:llava-hf/llava-1.5-7b-hf' -> 'llava-1.5-7b-hf'; 'openai:gpt-4o' -> 'gpt-4o'."""
    tail = spec.split(":", 1)[1] if ":" in spec and not spec.startswith(("/", ".")) else spec
    return tail.rstrip("/").split("/")[-1] or spec


def _text(value: Any, *keys: str) -> str | None:
    """``value`` if it is a string, else its first string entry under ``keys``."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return next((value[k] for k in keys if isinstance(value.get(k), str)), None)
    return None


def _retriever(flat: dict[str, Any]) -> str | None:
    """The retriever's name: an explicit ``retriever`` entry, else derived from where the examples came
    from: an index's encoder, else the file/dir name."""
    label = _text(flat.get("retriever"), "label", "name", "spec")
    if label:
        return label
    path = next((source for key in ("retrieval", "index")
                 if (source := _text(flat.get(key), "path", "label", "name"))), None)
    if not path:
        return None
    p = Path(path)
    if (p / "manifest.json").is_file():  # an index folder: its encoder
        with contextlib.suppress(OSError, InputError):
            label = _text(read_json_file(p / "manifest.json").get("encoder"), "label", "name", "spec")
            if label:
                return _short(label)
    if p.suffix in (".jsonl", ".json"):
        generic = {"run", "results", "retrieval", "retrieved", "topk", "run_file"}
        return p.parent.name if p.stem.lower() in generic and p.parent.name else p.stem
    return p.name or path


def summarize_run(run_dir: str | Path) -> RunSummary:
    """Read one run's manifest and metrics; a run not evaluated yet is an error that says which command to run."""
    run_dir = existing_path(run_dir, "run directory", folder=True)
    # one level of keys from the manifest, nested (``identity`` with its ``examples``, ``settings``) or
    # hand-written flat. Precedence: top level > identity > examples > settings.
    nested = read_run_manifest(run_dir)
    identity = nested.get("identity") if isinstance(nested.get("identity"), dict) else {}
    manifest: dict[str, Any] = {}
    for part in (nested.get("settings"), identity.get("examples"), identity, nested):
        if isinstance(part, dict):
            manifest.update(part)
    if not (run_dir / METRICS_FILE).exists():
        raise InputError("no metrics.json: run 'unirag evaluate captions' or 'unirag evaluate images' on it first",
                         path=run_dir)
    evaluation = read_json_file(run_dir / METRICS_FILE)
    task = evaluation.get("task") or manifest.get("task") or "caption"
    task = TASK_ALIASES.get(str(task), str(task))
    spec = _text(manifest.get("generator"), "label", "spec", "name") or "unknown"
    mode = str(manifest.get("mode") or "zero-shot")
    generator = _short(spec)
    if spec.startswith("retrieval:"):  # the retriever's own output: a baseline row (paper rows 1a/1b) ...
        generator = spec
        if mode in ("rag", "retrieval"):  # ... unless its examples were not retrieved (--mode random)
            mode = "retrieval"
    try:
        k = int(manifest.get("k") or 0)
    except (TypeError, ValueError):
        raise InputError("k must be an integer", path=run_dir / "manifest.json", field="k") from None
    if mode == "retrieval":
        k = max(k, 1)
    paper: Any = {}  # the paper's figures a reproduction grid recorded for this run
    if (run_dir / "paper.json").is_file():
        data = read_json_file(run_dir / "paper.json")
        paper = data.get("paper") if isinstance(data, dict) else None
        if not isinstance(paper, dict):
            raise InputError("expected {'paper': {metric: figure}}", path=run_dir / "paper.json",
                             field="paper")
    try:  # the finished queries the leakage guard counted in ("report": flagged examples; "exclude": none)
        guarded = [r for r in read_run_dir(run_dir).ok().values()
                   if isinstance(r.get("near_duplicates"), dict)]
    except InputError:
        guarded = []
    leaking = sum(1 for r in guarded if any(isinstance(e, dict) and e.get("near_duplicate")
                                            for e in r.get("examples") or ()))
    dataset = manifest.get("dataset") or Path(str(manifest.get("queries") or evaluation.get("queries") or
                                                   "queries")).stem
    return RunSummary(run_dir=run_dir, task=task, dataset=str(dataset), generator=generator, mode=mode,
                      retriever=_retriever(manifest), k=k, metrics=dict(evaluation.get("metrics") or {}),
                      skipped=dict(evaluation.get("skipped_metrics") or {}), manifest=manifest,
                      evaluation=evaluation, leak_rate=leaking / len(guarded) if guarded else None,
                      paper={str(m): float(v) for m, v in paper.items() if isinstance(v, int | float)})

