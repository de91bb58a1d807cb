"""An experiment grid from a YAML file: queries x retriever x generator x mode x k, one run per cell.

Each cell is an ordinary resumable run directory (``OUT/<generator>/<mode>-k<k>[-<retriever>]``),
so rerunning the experiment after a crash continues every unfinished cell and skips finished ones.
Relative paths in the YAML are relative to the YAML file. See ``examples/table3_grid.yaml``::

    out: runs/table3
    queries: data/coco/queries.jsonl
    images_root: data/coco
    pool: data/coco/pool.jsonl
    retrievers: {clip-sf: {retrieval: runs/clip-sf.jsonl}, blip-ff: {index: indexes/blip-ff}}
    generators: [openai:gpt-4o, hf:llava-hf/llava-1.5-13b-hf]
    options: {concurrency: 8}
    grid:
      - {mode: zero-shot, k: 0}
      - {mode: random, k: [1, 5]}
      - {mode: rag, k: [1, 5], retriever: [clip-sf, blip-ff]}
    cells:                      # optional explicit extra cells, same keys plus generator
      - {generator: retrieval:top1, mode: rag, k: 1, retriever: [clip-sf, blip-ff]}
"""

from __future__ import annotations

import fnmatch
import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unirag.errors import ConfigError, InputError, UniragError
from unirag.generators.options import GENERATOR_OPTIONS

TASKS = ("caption", "image")
RUN_OPTION_KEYS = {"concurrency", "seed", "max_tokens", "temperature", "max_attempts", "templates_dir", "prices",
                   "save_prompts", "limit"}
#: A grid entry or cell may use other inputs than the top level (e.g. text queries for image cells).
SOURCE_KEYS = {"queries", "images_root", "pool", "pool_images_root"}
IMAGE_OPTION_KEYS = {"width", "height", "steps", "guidance", "image_seed"}
PATH_KEYS = {"queries", "images_root", "pool", "pool_images_root", "templates_dir", "prices", "retrieval", "index",
             "out"}
_TOP_KEYS = {"name", "task", "out", "queries", "images_root", "pool", "pool_images_root", "retrievers", "generators",
             "options", "grid", "cells", "description"}


@dataclass
class Cell:
    name: str
    task: str
    generator: str
    mode: str
    k: int
    retriever: str | None
    sources: dict[str, Any]  # queries, images_root, pool, retrieval/index
    options: dict[str, Any] = field(default_factory=dict)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")


def _as_list(v: Any) -> list:
    return list(v) if isinstance(v, list | tuple) else [v]


def load_experiment(path: str | Path) -> tuple[dict[str, Any], list[Cell]]:
    """Parse and expand a grid file. Errors name the file and the offending key."""
    import yaml

    path = Path(path)
    if not path.exists():
        raise InputError("experiment file not found", path=path)
    try:
        spec = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise InputError(f"invalid YAML ({e})", path=path) from None
    if not isinstance(spec, dict):
        raise InputError("expected a mapping at the top level", path=path)
    unknown = set(spec) - _TOP_KEYS
    if unknown:
        raise InputError(f"unknown key(s) {', '.join(sorted(unknown))}; allowed: {', '.join(sorted(_TOP_KEYS))}",
                         path=path)
    base = path.resolve().parent

    def resolve(key: str, value: Any) -> Any:
        if key in PATH_KEYS and value is not None:
            p = Path(str(value)).expanduser()
            return str(p if p.is_absolute() else base / p)
        return value

    for key in ("out", "queries"):
        if not spec.get(key):
            raise InputError("missing required key", path=path, field=key)
    top = {k: resolve(k, spec.get(k)) for k in ("out", "queries", "images_root", "pool", "pool_images_root")}
    retrievers = spec.get("retrievers") or {}
    if not isinstance(retrievers, dict):
        raise InputError("expected a mapping name -> {retrieval: RUN} or {index: DIR}", path=path, field="retrievers")
    for name, src in retrievers.items():
        if not isinstance(src, dict) or len(set(src) & {"retrieval", "index"}) != 1:
            raise InputError("each retriever needs exactly one of 'retrieval' or 'index'", path=path,
                             field=f"retrievers.{name}")
    options = {k: resolve(k, v) for k, v in (spec.get("options") or {}).items()}
    _check_option_keys(options, path, "options")
    default_task = spec.get("task", "caption")
    entries: list[dict[str, Any]] = []
    for i, entry in enumerate(spec.get("grid") or []):
        if not isinstance(entry, dict):
            raise InputError("grid entries must be mappings", path=path, field=f"grid[{i}]")
        for gen in _as_list(entry.get("generator", spec.get("generators") or [])):
            entries.append({**entry, "generator": gen, "_where": f"grid[{i}]"})
    for i, entry in enumerate(spec.get("cells") or []):
        if not isinstance(entry, dict) or "generator" not in entry:
            raise InputError("cells need a generator", path=path, field=f"cells[{i}]")
        for gen in _as_list(entry["generator"]):
            entries.append({**entry, "generator": gen, "_where": f"cells[{i}]"})
    if not entries:
        raise InputError("no cells: give 'generators' and 'grid', or 'cells'", path=path)

    cells: list[Cell] = []
    seen: set[str] = set()
    for entry in entries:
        where = entry.pop("_where")
        task = entry.get("task", default_task)
        if task not in TASKS:
            raise InputError(f"unknown task {task!r}; expected {' or '.join(TASKS)}", path=path, field=where)
        mode = entry.get("mode")
        if mode is None:
            raise InputError("missing 'mode'", path=path, field=where)
        cell_opts = {k: resolve(k, v) for k, v in entry.items()
                     if k not in {"generator", "mode", "k", "retriever", "task"} | SOURCE_KEYS}
        overrides = {k: resolve(k, v) for k, v in entry.items() if k in SOURCE_KEYS}
        _check_option_keys(cell_opts, path, where)
        for k, retriever in itertools.product(_as_list(entry.get("k", 0 if mode == "zero-shot" else 1)),
                                              _as_list(entry.get("retriever"))):
            sources = {"queries": top["queries"], "images_root": top["images_root"], "pool": top["pool"],
                       "pool_images_root": top["pool_images_root"], **overrides}
            if mode == "rag":
                if retriever not in retrievers:
                    raise InputError(f"rag cells need a retriever named in 'retrievers' (got {retriever!r})",
                                     path=path, field=where)
                sources.update({k2: resolve(k2, v) for k2, v in retrievers[retriever].items()})
            elif retriever is not None:
                raise InputError(f"only rag cells take a retriever (mode {mode})", path=path, field=where)
            name = "" if task == "caption" else f"{task}/"
            name += f"{_slug(str(entry['generator']))}/{mode}-k{k}" + (f"-{_slug(retriever)}" if retriever else "")
            if name in seen:
                continue
            seen.add(name)
            cells.append(Cell(name=name, task=task, generator=str(entry["generator"]), mode=mode, k=int(k),
                              retriever=retriever, sources=sources, options={**options, **cell_opts}))
    return {**spec, **top, "path": str(path)}, cells


def _check_option_keys(opts: dict[str, Any], path: Path, where: str) -> None:
    allowed = GENERATOR_OPTIONS | RUN_OPTION_KEYS | IMAGE_OPTION_KEYS
    bad = set(opts) - allowed
    if bad:
        raise InputError(f"unknown option(s) {', '.join(sorted(bad))}; allowed: {', '.join(sorted(allowed))}",
                         path=path, field=where)


def select_cells(cells: list[Cell], patterns: tuple[str, ...]) -> list[Cell]:
    if not patterns:
        return cells
    chosen = [c for c in cells if any(fnmatch.fnmatch(c.name, p) for p in patterns)]
    if not chosen:
        raise ConfigError(f"no cell matches {', '.join(patterns)}; cells: {', '.join(c.name for c in cells)}")
    return chosen


def run_cell(cell: Cell, out_root: str | Path, progress: bool = True, limit: int | None = None,
             engine: Any = "local") -> dict[str, Any]:
    """Run (or resume) one cell into ``out_root/cell.name``; ``engine`` as for a single run (a
    :class:`~unirag.runs.engine.WorkerPool` lets cells with the same model share its workers)."""
    out = Path(out_root) / cell.name
    opts = dict(cell.options)
    if limit is not None:
        opts["limit"] = limit
    gen_opts = {k: v for k, v in opts.items() if k in GENERATOR_OPTIONS}
    run_opts = {k: v for k, v in opts.items() if k in RUN_OPTION_KEYS}
    if cell.task == "caption":
        from unirag.pipelines.caption import CaptionConfig, run_captioning

        pool_images_root = cell.sources.get("pool_images_root")
        cfg = CaptionConfig(queries=cell.sources["queries"], generator=cell.generator, out=out, mode=cell.mode,
                            k=cell.k, images_root=cell.sources.get("images_root"), pool_images_root=pool_images_root,
                            retrieval=cell.sources.get("retrieval"), index=cell.sources.get("index"),
                            pool=cell.sources.get("pool"), generator_options=gen_opts, progress=progress,
                            engine=engine, **run_opts)
        return run_captioning(cfg)["counts"]
    return _run_image_cell(cell, out, opts, progress, engine)


def _run_image_cell(cell: Cell, out: Path, opts: dict[str, Any], progress: bool, engine: Any) -> dict[str, Any]:
    """Delegate to the image pipeline (:mod:`unirag.pipelines.image_gen`)."""
    try:
        from unirag.pipelines.image_gen import ImageSettings, run_image_generation
    except ImportError as e:
        raise ConfigError(f"image cells need the image generation pipeline ({e})") from None
    from unirag.data.mbeir import read_queries
    from unirag.pipelines.examples import make_selector

    queries = read_queries(cell.sources["queries"])
    selector = make_selector(cell.mode, cell.k, queries=queries, pool_path=cell.sources.get("pool"),
                             retrieval=cell.sources.get("retrieval"), index=cell.sources.get("index"),
                             seed=opts.get("seed", 0), query_images_root=cell.sources.get("images_root"))
    image = {k: opts[k] for k in ("width", "height", "steps", "guidance") if k in opts}
    if "image_seed" in opts:
        image["seed"] = opts["image_seed"]
    pool_root = cell.sources.get("pool_images_root") or cell.sources.get("images_root")
    result = run_image_generation(queries, None, selector, out, images_root=pool_root,
                                  settings=ImageSettings(**image), concurrency=opts.get("concurrency", 4),
                                  limit=opts.get("limit"), save_prompts=opts.get("save_prompts", 5),
                                  progress=progress, engine=engine, spec=cell.generator,
                                  generator_options={k: v for k, v in opts.items() if k in GENERATOR_OPTIONS})
    # Same shape as caption cells: the final totals of the run directory.
    return {k[len("total_"):]: v for k, v in result.items() if k.startswith("total_")} or result


def cell_states(path: str | Path, only: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """Each selected cell's name and state ("not started", or its run status and ok/queries count),
    read from the cells' run manifests; runs nothing (``unirag run --list``)."""
    from unirag.runs.rundir import read_run_manifest

    spec, cells = load_experiment(path)
    states = []
    for cell in select_cells(cells, only):
        m = read_run_manifest(Path(spec["out"]) / cell.name)
        state = "not started"
        if m:
            c = m.get("counts", {})
            state = f"{m.get('status')} ({c.get('ok', 0)}/{c.get('queries', '?')} ok)"
        states.append((cell.name, state))
    return states


def _model_key(cell: Cell) -> tuple:
    """Cells with equal keys use the same loaded model (same task kind, spec and generator options)."""
    opts = sorted((k, str(v)) for k, v in cell.options.items() if k in GENERATOR_OPTIONS)
    return (cell.task, cell.generator, tuple(opts))


def run_experiment(path: str | Path, only: tuple[str, ...] = (), progress: bool = True, limit: int | None = None,
                   echo=print, engine: Any = "local") -> list[dict[str, Any]]:
    """Run the grid file ``path`` (what ``unirag run`` does): every cell whose name matches a glob of
    ``only`` (all when empty) into ``OUT/<cell name>``, each resumable; ``limit``: the first N queries.
    A cell that fails to start (bad config, no key) is reported and the others go on. Returns one
    ``{"cell", "status": "ok"|"failed", "counts"|"error"}`` per cell.

    ``engine="ray"`` (or :class:`~unirag.runs.engine.EngineOptions`): local-model cells run on Ray
    workers of one pool for the whole grid, cells grouped by model so that each worker loads each
    model once for all the cells that use it (API cells run here, as always)."""
    from contextlib import nullcontext

    from unirag.runs.atomic import atomic_write_json
    from unirag.runs.engine import WorkerPool, engine_options

    spec, cells = load_experiment(path)
    cells = select_cells(cells, only)
    options = engine_options(engine)
    if options.ray and not isinstance(engine, WorkerPool):
        first = {}
        for c in cells:
            first.setdefault(_model_key(c), len(first))
        cells = sorted(cells, key=lambda c: first[_model_key(c)])  # stable: the file's order within a model
        context = WorkerPool(options, progress=progress)
    else:
        context = nullcontext(engine)
    with context as shared:
        return _run_cells(spec, cells, progress, limit, echo, shared, atomic_write_json)


def _run_cells(spec, cells, progress, limit, echo, engine, atomic_write_json) -> list[dict[str, Any]]:
    results = []
    for i, cell in enumerate(cells, start=1):
        echo(f"[{i}/{len(cells)}] {cell.name}")
        try:
            counts = run_cell(cell, spec["out"], progress=progress, limit=limit, engine=engine)
            results.append({"cell": cell.name, "status": "ok", "counts": counts})
        except UniragError as e:
            echo(f"  failed: {e}")
            results.append({"cell": cell.name, "status": "failed", "error": str(e)})
        atomic_write_json(Path(spec["out"]) / "experiment.json", {"experiment": spec["path"], "cells": results})
    return results
