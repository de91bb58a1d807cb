"""Reading an experiment grid file: YAML -> the cells to run (queries x retriever x generator x mode x k).

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

Reproduction grids (``examples/reproduce/``) add: ``profile:`` (default|official) and ``settings:``
(setting -> value, see :mod:`unirag.profiles`) at the top or on any entry; ``source:`` naming the
paper table; on each entry ``row:`` (the paper's row label) and ``paper:`` (metric -> the paper's
figure, metric names as ``metrics.json`` has them), written to ``OUT/<cell>/paper.json`` for
``unirag report``; and ``task: cir`` cells (``dataset``, ``annotations``, ``split_file``, ``agents``,
``encoder``, ``k_prime``, ``lam``, ``stages``) run by :func:`unirag.cir.api.run_cir`.
:class:`GridOverrides` (``unirag run --data-root/--out/--generator/--option/--profile``) changes
where data is and which generators run without editing the file. Running the cells is
:mod:`unirag.pipelines.experiment`; printing their plan, :mod:`unirag.pipelines.experiment_plan`.
"""


from __future__ import annotations

import fnmatch
import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unirag.data.text import read_text
from unirag.errors import ConfigError, InputError, UniragError
from unirag.generators.options import GENERATOR_OPTIONS

TASKS = ("caption", "image", "cir")
RUN_OPTION_KEYS = {"concurrency", "seed", "max_tokens", "temperature", "max_attempts", "templates_dir", "prices",
                   "save_prompts", "limit", "official_prompts", "lavit_code", "offload", "selection",
                   "decode_workers"}
#: What a ``task: cir`` cell takes (passed to :func:`unirag.cir.api.run_cir`).
CIR_KEYS = {"dataset", "annotations", "split_file", "agents", "encoder", "k_prime", "lam", "k", "stages",
            "exclude_reference", "stage", "name"}
#: cir parameters a grid's ``options`` (or ``unirag run --option``) may set for every cir cell.
CIR_OPTION_KEYS = {"encoder", "agents", "stages", "k_prime", "lam"}
#: Keys of an entry that describe the cell (not run options).
CELL_META_KEYS = {"profile", "settings", "paper", "row"}
#: A grid entry or cell may use other inputs than the top level (e.g. text queries for image cells).
SOURCE_KEYS = {"queries", "images_root", "pool", "pool_images_root"}
#: (the picture's seed is the setting ``image_seed``: ``settings: {image_seed: N}``)
IMAGE_OPTION_KEYS = {"width", "height", "steps", "guidance"}
PATH_KEYS = {"queries", "images_root", "pool", "pool_images_root", "templates_dir", "prices", "retrieval", "index",
             "out", "official_prompts", "lavit_code", "annotations", "split_file", "agents"}
_TOP_KEYS = {"name", "task", "out", "queries", "images_root", "pool", "pool_images_root", "retrievers", "generators",
             "options", "grid", "cells", "description", "profile", "settings", "source"}


@dataclass
class GridOverrides:
    """Changes to a grid without editing it (``unirag run`` options; the reproduction tests use them).

    ``data_root``: relative data paths start here instead of at the YAML file's folder; ``out``: the
    output folder; ``generators``: spec -> replacement spec; ``options``: run/generator options for
    every cell (e.g. ``base_url``); ``profile``/``settings``: override every cell's.
    """

    data_root: str | Path | None = None
    out: str | Path | None = None
    generators: dict[str, str] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    profile: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)


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
    #: the resolved behaviour settings (profile + overrides), a :class:`unirag.profiles.Settings`
    settings: Any = None
    #: the paper's figures for this cell (metric -> value), its row label and table
    paper: dict[str, float] = field(default_factory=dict)
    row: str | None = None
    source: str | None = None
    #: ``task: cir`` cells: what :func:`unirag.cir.api.run_cir` gets
    cir: dict[str, Any] = field(default_factory=dict)

    def paper_record(self) -> dict[str, Any]:
        """What ``OUT/<cell>/paper.json`` holds (read by ``unirag report`` for its paper and Δ columns)."""
        return {"source": self.source, "row": self.row, "cell": self.name, "paper": dict(self.paper)}


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")


def _as_list(v: Any) -> list:
    return list(v) if isinstance(v, list | tuple) else [v]


def load_experiment(path: str | Path, overrides: GridOverrides | None = None) -> tuple[dict[str, Any], list[Cell]]:
    """Parse and expand a grid file. Errors name the file and the offending key."""
    import yaml

    from unirag.profiles import resolve as resolve_settings
    from unirag.profiles import split_settings

    over = overrides or GridOverrides()
    path = Path(path)
    if not path.exists():
        raise InputError("experiment file not found", path=path)
    try:
        spec = yaml.safe_load(read_text(path))
    except yaml.YAMLError as e:
        raise InputError(f"invalid YAML ({e})", path=path) from None
    if not isinstance(spec, dict):
        raise InputError("expected a mapping at the top level", path=path)
    unknown = set(spec) - _TOP_KEYS
    if unknown:
        raise InputError(f"unknown key(s) {', '.join(sorted(unknown))}; allowed: {', '.join(sorted(_TOP_KEYS))}",
                         path=path)
    base = Path(over.data_root).resolve() if over.data_root is not None else path.resolve().parent

    def resolve(key: str, value: Any) -> Any:
        if key in PATH_KEYS and isinstance(value, list | tuple):
            return [resolve(key, v) for v in value]
        if key in PATH_KEYS and value is not None:
            p = Path(str(value)).expanduser()
            return str(p if p.is_absolute() else base / p)
        return value

    def settings_of(entry: dict[str, Any], where: str) -> tuple[Any, dict[str, Any]]:
        """The cell's settings: ``unirag run`` options > the entry's > the grid's (profile and settings),
        and the example-selection names among them (as ``--set`` takes them)."""
        for part, name in ((spec, "settings"), (entry, f"{where}.settings")):
            if part.get("settings") is not None and not isinstance(part["settings"], dict):
                raise InputError("expected a mapping setting -> value", path=path, field=name)
        given = {**(spec.get("settings") or {}), **(entry.get("settings") or {}), **over.settings}
        try:
            overrides, chosen = split_settings(given, selection=entry.get("task", default_task) != "cir")
            return resolve_settings(over.profile or entry.get("profile") or spec.get("profile") or "default",
                                    **overrides), chosen
        except UniragError as e:
            raise InputError(str(e), path=path, field=f"{where}.settings") from None

    needs_queries = spec.get("task", "caption") != "cir" or any(
        isinstance(e, dict) and e.get("task", spec.get("task", "caption")) != "cir"
        for e in [*(spec.get("grid") or []), *(spec.get("cells") or [])])
    for key in ("out", "queries") if needs_queries else ("out",):
        if not spec.get(key):
            raise InputError("missing required key", path=path, field=key)
    top = {k: resolve(k, spec.get(k)) for k in ("out", "queries", "images_root", "pool", "pool_images_root")}
    if over.out is not None:
        top["out"] = str(Path(over.out).resolve())
    retrievers = spec.get("retrievers") or {}
    if not isinstance(retrievers, dict):
        raise InputError("expected a mapping name -> {retrieval: RUN} or {index: DIR}", path=path, field="retrievers")
    for name, src in retrievers.items():
        if not isinstance(src, dict) or len(set(src) & {"retrieval", "index"}) != 1:
            raise InputError("each retriever needs exactly one of 'retrieval' or 'index'", path=path,
                             field=f"retrievers.{name}")
    options = {k: resolve(k, v) for k, v in {**(spec.get("options") or {}), **over.options}.items()}
    forced = {k: resolve(k, v) for k, v in over.options.items()}  # unirag run --option: wins over every cell
    _check_option_keys(options, path, "options")
    default_task = spec.get("task", "caption")
    entries: list[dict[str, Any]] = []
    for i, entry in enumerate(spec.get("grid") or []):
        if not isinstance(entry, dict):
            raise InputError("grid entries must be mappings", path=path, field=f"grid[{i}]")
        for gen in _as_list(entry.get("generator", spec.get("generators") or [])):
            entries.append({**entry, "generator": gen, "_where": f"grid[{i}]"})
    for i, entry in enumerate(spec.get("cells") or []):
        if isinstance(entry, dict) and entry.get("task", default_task) == "cir":
            entries.append({**entry, "generator": entry.get("generator", "xr" if entry.get("agents") else "baseline"),
                            "mode": "cir", "_where": f"cells[{i}]"})
            continue
        if not isinstance(entry, dict) or "generator" not in entry:
            raise InputError("cells need a generator", path=path, field=f"cells[{i}]")
        for gen in _as_list(entry["generator"]):
            entries.append({**entry, "generator": gen, "_where": f"cells[{i}]"})
    for entry in entries:
        entry["generator"] = over.generators.get(str(entry["generator"]), entry["generator"])
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
        paper = entry.get("paper") or {}
        if not isinstance(paper, dict) or not all(isinstance(v, int | float) for v in paper.values()):
            raise InputError("expected a mapping metric -> the paper's figure", path=path, field=f"{where}.paper")
        settings, chosen = settings_of(entry, where)
        meta = {"settings": settings, "paper": {str(k): float(v) for k, v in paper.items()},
                "row": entry.get("row"), "source": spec.get("source")}
        if task == "cir":
            cell = _cir_cell(entry, where, path, top, options, resolve, meta, forced)
            if cell.name in seen:
                raise InputError(f"two cir cells named {cell.name!r}; give each a 'name'", path=path, field=where)
            seen.add(cell.name)
            cells.append(cell)
            continue
        cell_opts = {k: resolve(k, v) for k, v in entry.items()
                     if k not in {"generator", "mode", "k", "retriever", "task"} | SOURCE_KEYS | CELL_META_KEYS}
        overrides = {k: resolve(k, v) for k, v in entry.items() if k in SOURCE_KEYS}
        _check_option_keys(cell_opts, path, where)
        if chosen:  # example-selection settings: over the cell's selection option
            from unirag.retrieval.selection import selection_from_settings

            base = cell_opts.get("selection", options.get("selection"))
            try:
                cell_opts["selection"] = selection_from_settings(chosen, base).to_dict()
            except UniragError as e:
                raise InputError(str(e), path=path, field=f"{where}.settings") from None
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
                              retriever=retriever, sources=sources, options={**options, **cell_opts, **forced},
                              **meta))
    return {**spec, **top, "path": str(path)}, cells


def _cir_cell(entry: dict[str, Any], where: str, path: Path, top: dict[str, Any], options: dict[str, Any],
              resolve, meta: dict[str, Any], forced: dict[str, Any]) -> Cell:
    """A ``task: cir`` cell: one :func:`unirag.cir.api.run_cir` call on a benchmark's annotation files."""
    bad = set(entry) - CIR_KEYS - CELL_META_KEYS - {"generator", "mode", "task", "images_root", "concurrency"}
    if bad:
        raise InputError(f"unknown key(s) {', '.join(sorted(bad))} for a cir cell; allowed: "
                         f"{', '.join(sorted(CIR_KEYS | CELL_META_KEYS | {'images_root', 'concurrency'}))}",
                         path=path, field=where)
    for key in ("dataset", "annotations"):
        if not entry.get(key):
            raise InputError(f"cir cells need '{key}'", path=path, field=where)
    cir = {k: resolve(k, v) for k, v in entry.items() if k in CIR_KEYS}
    grid_wide = {k: v for k, v in options.items() if k in CIR_OPTION_KEYS}
    cir = {**grid_wide, **cir, **{k: v for k, v in forced.items() if k in CIR_OPTION_KEYS}}
    cir["annotations"] = _as_list(cir["annotations"])
    images_root = resolve("images_root", entry.get("images_root")) or top["images_root"]
    label = _slug(str(entry.get("name") or entry["generator"]))
    cell_options = {k: v for k, v in options.items() if k in {"concurrency", "limit", "decode_workers"}}
    if "concurrency" in entry:
        cell_options["concurrency"] = entry["concurrency"]
    return Cell(name=f"cir/{_slug(str(entry['dataset']))}/{label}", task="cir", generator=str(entry["generator"]),
                mode="cir", k=int(entry.get("k") or 50), retriever=None,
                sources={"images_root": images_root, "annotations": cir["annotations"],
                         "split_file": cir.get("split_file"), "agents": cir.get("agents")},
                options=cell_options, cir=cir, **meta)


def _check_option_keys(opts: dict[str, Any], path: Path, where: str) -> None:
    allowed = GENERATOR_OPTIONS | RUN_OPTION_KEYS | IMAGE_OPTION_KEYS | CIR_OPTION_KEYS
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
