"""An experiment grid's cells: each entry of a grid file (:mod:`unirag.pipelines.experiment_grid`)
becomes one or more :class:`Cell` (k x retriever), with its resolved behaviour settings, inputs and
run options. ``task: cir`` entries become one cell each, run by :func:`unirag.cir.api.run_cir`."""

from __future__ import annotations

import fnmatch
import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unirag.errors import ConfigError, InputError, UniragError
from unirag.pipelines.experiment_grid import (
    CELL_META_KEYS,
    CIR_KEYS,
    CIR_OPTION_KEYS,
    SOURCE_KEYS,
    TASKS,
    Grid,
    GridOverrides,
    _as_list,
    _check_option_keys,
    read_grid,
)


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


def load_experiment(path: str | Path, overrides: GridOverrides | None = None) -> tuple[dict[str, Any], list[Cell]]:
    """Parse and expand a grid file. Errors name the file and the offending key."""
    grid = read_grid(path, overrides)
    cells: list[Cell] = []
    seen: set[str] = set()
    for entry in grid.entries:
        for cell in _entry_cells(grid, dict(entry)):
            if cell.name in seen:
                if cell.task == "cir":
                    raise InputError(f"two cir cells named {cell.name!r}; give each a 'name'", path=grid.path,
                                     field=entry["_where"])
                continue
            seen.add(cell.name)
            cells.append(cell)
    return {**grid.spec, **grid.top, "path": str(grid.path)}, cells


def _settings_of(grid: Grid, entry: dict[str, Any], where: str) -> tuple[Any, dict[str, Any]]:
    """The cell's settings: ``unirag run`` options > the entry's > the grid's (profile and settings),
    and the example-selection names among them (as ``--set`` takes them)."""
    from unirag.profiles import resolve, split_settings

    spec, over, path = grid.spec, grid.overrides, grid.path
    for part, name in ((spec, "settings"), (entry, f"{where}.settings")):
        if part.get("settings") is not None and not isinstance(part["settings"], dict):
            raise InputError("expected a mapping setting -> value", path=path, field=name)
    given = {**(spec.get("settings") or {}), **(entry.get("settings") or {}), **over.settings}
    try:
        overrides, chosen = split_settings(given, selection=entry.get("task", grid.default_task) != "cir")
        return resolve(over.profile or entry.get("profile") or spec.get("profile") or "default", **overrides), chosen
    except UniragError as e:
        raise InputError(str(e), path=path, field=f"{where}.settings") from None


def _entry_cells(grid: Grid, entry: dict[str, Any]) -> list[Cell]:
    """One entry's cells: one per k and retriever (a cir entry: one)."""
    path, resolve = grid.path, grid.resolve
    where = entry.pop("_where")
    task = entry.get("task", grid.default_task)
    if task not in TASKS:
        raise InputError(f"unknown task {task!r}; expected {' or '.join(TASKS)}", path=path, field=where)
    mode = entry.get("mode")
    if mode is None:
        raise InputError("missing 'mode'", path=path, field=where)
    paper = entry.get("paper") or {}
    if not isinstance(paper, dict) or not all(isinstance(v, int | float) for v in paper.values()):
        raise InputError("expected a mapping metric -> the paper's figure", path=path, field=f"{where}.paper")
    settings, chosen = _settings_of(grid, entry, where)
    meta = {"settings": settings, "paper": {str(k): float(v) for k, v in paper.items()},
            "row": entry.get("row"), "source": grid.spec.get("source")}
    if task == "cir":
        return [_cir_cell(entry, where, path, grid.top, grid.options, resolve, meta, grid.forced)]
    cell_opts = {k: resolve(k, v) for k, v in entry.items()
                 if k not in {"generator", "mode", "k", "retriever", "task"} | SOURCE_KEYS | CELL_META_KEYS}
    overrides = {k: resolve(k, v) for k, v in entry.items() if k in SOURCE_KEYS}
    _check_option_keys(cell_opts, path, where)
    if chosen:  # example-selection settings: over the cell's selection option
        from unirag.retrieval.selection import selection_from_settings

        base = cell_opts.get("selection", grid.options.get("selection"))
        try:
            cell_opts["selection"] = selection_from_settings(chosen, base).to_dict()
        except UniragError as e:
            raise InputError(str(e), path=path, field=f"{where}.settings") from None
    top, cells = grid.top, []
    for k, retriever in itertools.product(_as_list(entry.get("k", 0 if mode == "zero-shot" else 1)),
                                          _as_list(entry.get("retriever"))):
        sources = {"queries": top["queries"], "images_root": top["images_root"], "pool": top["pool"],
                   "pool_images_root": top["pool_images_root"], **overrides}
        if mode == "rag":
            if retriever not in grid.retrievers:
                raise InputError(f"rag cells need a retriever named in 'retrievers' (got {retriever!r})",
                                 path=path, field=where)
            sources.update({k2: resolve(k2, v) for k2, v in grid.retrievers[retriever].items()})
        elif retriever is not None:
            raise InputError(f"only rag cells take a retriever (mode {mode})", path=path, field=where)
        name = "" if task == "caption" else f"{task}/"
        name += f"{_slug(str(entry['generator']))}/{mode}-k{k}" + (f"-{_slug(retriever)}" if retriever else "")
        cells.append(Cell(name=name, task=task, generator=str(entry["generator"]), mode=mode, k=int(k),
                          retriever=retriever, sources=sources,
                          options={**grid.options, **cell_opts, **grid.forced}, **meta))
    return cells


def _cir_cell(entry: dict[str, Any], where: str, path: Path, top: dict[str, Any], options: dict[str, Any],
              resolve, meta: dict[str, Any], forced: dict[str, Any]) -> Cell:
    """A ``task: cir`` cell: one :func:`unirag.cir.api.run_cir` call on a benchmark's annotation files."""
    bad = set(entry) - CIR_KEYS - CELL_META_KEYS - {"generator", "mode", "task", "images_root", "concurrency",
                                                    "official_prompts"}
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
    cell_options = {k: v for k, v in options.items()
                    if k in {"concurrency", "limit", "decode_workers", "official_prompts"}}
    if "concurrency" in entry:
        cell_options["concurrency"] = entry["concurrency"]
    if entry.get("official_prompts"):  # the official X^R checkout, read under xr_prompts=official
        cell_options["official_prompts"] = resolve("official_prompts", entry["official_prompts"])
    return Cell(name=f"cir/{_slug(str(entry['dataset']))}/{label}", task="cir", generator=str(entry["generator"]),
                mode="cir", k=int(entry.get("k") or 50), retriever=None,
                sources={"images_root": images_root, "annotations": cir["annotations"],
                         "split_file": cir.get("split_file"), "agents": cir.get("agents")},
                options=cell_options, cir=cir, **meta)


def select_cells(cells: list[Cell], patterns: tuple[str, ...]) -> list[Cell]:
    if not patterns:
        return cells
    chosen = [c for c in cells if any(fnmatch.fnmatch(c.name, p) for p in patterns)]
    if not chosen:
        raise ConfigError(f"no cell matches {', '.join(patterns)}; cells: {', '.join(c.name for c in cells)}")
    return chosen
