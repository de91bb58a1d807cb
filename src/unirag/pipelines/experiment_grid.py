"""Reading an experiment grid file (run by :mod:`unirag.pipelines.experiment`, planned by
:mod:`unirag.pipelines.experiment_plan`). Relative paths in the YAML are relative to the YAML file.
See ``examples/table3_grid.yaml``::

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
where data is and which generators run without editing the file.
"""

from __future__ import annotations

import fnmatch
import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unirag.data.text import read_yaml_mapping
from unirag.errors import ConfigError, InputError, UniragError
from unirag.generators.registry import GENERATOR_OPTIONS
from unirag.profiles import resolve as resolve_settings
from unirag.profiles import split_settings
from unirag.retrieval.selection import selection_from_settings

TASKS = ("caption", "image", "cir")
#: The run options a ``task: cir`` cell keeps from the grid's ``options`` (its cir parameters: CIR_OPTION_KEYS).
CIR_RUN_KEYS = {"concurrency", "limit", "decode_workers", "official_prompts"}
RUN_OPTION_KEYS = CIR_RUN_KEYS | {"seed", "max_tokens", "temperature", "max_attempts", "templates_dir", "prices",
                                  "save_prompts", "selection"}
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


def _as_list(v: Any) -> list:
    return list(v) if isinstance(v, list | tuple) else [v]


def _check_option_keys(opts: dict[str, Any], path: Path, where: str) -> None:
    allowed = GENERATOR_OPTIONS | RUN_OPTION_KEYS | IMAGE_OPTION_KEYS | CIR_OPTION_KEYS
    bad = set(opts) - allowed
    if bad:
        raise InputError(f"unknown option(s) {', '.join(sorted(bad))}; allowed: {', '.join(sorted(allowed))}",
                         path=path, field=where)


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


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")


def load_experiment(path: str | Path, overrides: GridOverrides | None = None, only: tuple[str, ...] = ()
                    ) -> tuple[dict[str, Any], list[Cell]]:
    """Read and check a grid file and expand it into cells; only the cells whose name matches a glob of
    ``only`` (all when empty). Errors name the file and the offending key."""
    over = overrides or GridOverrides()
    path = Path(path)
    spec = read_yaml_mapping(path, "experiment file")
    unknown = set(spec) - _TOP_KEYS
    if unknown:
        raise InputError(f"unknown key(s) {', '.join(sorted(unknown))}; allowed: {', '.join(sorted(_TOP_KEYS))}",
                         path=path)
    base = Path(over.data_root).resolve() if over.data_root is not None else path.resolve().parent
    default_task = spec.get("task", "caption")

    def resolve(key: str, value: Any) -> Any:
        """A value as the grid means it: a path key's relative path starts at the file's folder (or
        ``--data-root``)."""
        if key in PATH_KEYS and isinstance(value, list | tuple):
            return [resolve(key, v) for v in value]
        if key in PATH_KEYS and value is not None:
            return str(base / Path(str(value)).expanduser())  # an absolute path stays as it is
        return value

    needs_queries = default_task != "cir" or any(
        isinstance(e, dict) and e.get("task", default_task) != "cir"
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
    # the grid's options with `unirag run --option` over them; forced: the latter alone (they win over every
    # cell's own)
    options = {k: resolve(k, v) for k, v in {**(spec.get("options") or {}), **over.options}.items()}
    forced = {k: resolve(k, v) for k, v in over.options.items()}
    _check_option_keys(options, path, "options")
    entries: list[tuple[str, dict[str, Any]]] = []  # the grid rows (one per generator) and the cells
    for part in ("grid", "cells"):
        for i, entry in enumerate(spec.get(part) or []):
            if part == "cells" and isinstance(entry, dict) and entry.get("task", default_task) == "cir":
                entry = {**entry, "generator": entry.get("generator", "xr" if entry.get("agents") else "baseline"),
                         "mode": "cir"}
            if not isinstance(entry, dict) or (part == "cells" and "generator" not in entry):
                raise InputError("grid entries must be mappings" if part == "grid" else "cells need a generator",
                                 path=path, field=f"{part}[{i}]")
            for gen in _as_list(entry.get("generator", spec.get("generators") or [])):  # replaced as asked
                entries.append((f"{part}[{i}]", {**entry, "generator": over.generators.get(str(gen), gen)}))
    if not entries:
        raise InputError("no cells: give 'generators' and 'grid', or 'cells'", path=path)

    def entry_cells(where: str, entry: dict[str, Any]) -> list[Cell]:
        """One entry's cells: one per k and retriever (a cir entry: one)."""
        task = entry.get("task", default_task)
        if task not in TASKS:
            raise InputError(f"unknown task {task!r}; expected {' or '.join(TASKS)}", path=path, field=where)
        mode = entry.get("mode")
        if mode is None:
            raise InputError("missing 'mode'", path=path, field=where)
        paper = entry.get("paper") or {}
        if not isinstance(paper, dict) or not all(isinstance(v, int | float) for v in paper.values()):
            raise InputError("expected a mapping metric -> the paper's figure", path=path, field=f"{where}.paper")
        # The cell's settings: `unirag run` options > the entry's > the grid's (profile and settings), and the
        # cell's selection option with the example-selection names among them (as --set takes them) laid over it.
        for part, name in ((spec, "settings"), (entry, f"{where}.settings")):
            if part.get("settings") is not None and not isinstance(part["settings"], dict):
                raise InputError("expected a mapping setting -> value", path=path, field=name)
        given = {**(spec.get("settings") or {}), **(entry.get("settings") or {}), **over.settings}
        try:
            named, chosen = split_settings(given, selection=task != "cir")
            settings = resolve_settings(over.profile or entry.get("profile") or spec.get("profile") or "default",
                                        **named)
            own = entry.get("selection", options.get("selection"))
            selection = selection_from_settings(chosen, own).to_dict() if chosen else None
        except UniragError as e:
            raise InputError(str(e), path=path, field=f"{where}.settings") from None
        meta = {"settings": settings, "paper": {str(k): float(v) for k, v in paper.items()},
                "row": entry.get("row"), "source": spec.get("source")}
        if task == "cir":  # one run_cir call on a benchmark's annotation files
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
            cell_options = {k: v for k, v in options.items() if k in CIR_RUN_KEYS}
            if "concurrency" in entry:
                cell_options["concurrency"] = entry["concurrency"]
            if entry.get("official_prompts"):  # the official X^R checkout, read under xr_prompts=official
                cell_options["official_prompts"] = resolve("official_prompts", entry["official_prompts"])
            return [Cell(name=f"cir/{_slug(str(entry['dataset']))}/{label}", task="cir",
                         generator=str(entry["generator"]), mode="cir", k=int(entry.get("k") or 50), retriever=None,
                         sources={"images_root": images_root, "annotations": cir["annotations"],
                                  "split_file": cir.get("split_file"), "agents": cir.get("agents")},
                         options=cell_options, cir=cir, **meta)]
        cell_opts = {k: resolve(k, v) for k, v in entry.items()
                     if k not in {"generator", "mode", "k", "retriever", "task"} | SOURCE_KEYS | CELL_META_KEYS}
        own_sources = {k: resolve(k, v) for k, v in entry.items() if k in SOURCE_KEYS}
        _check_option_keys(cell_opts, path, where)
        if selection is not None:
            cell_opts["selection"] = selection
        cells = []
        for k, retriever in itertools.product(_as_list(entry.get("k", 0 if mode == "zero-shot" else 1)),
                                              _as_list(entry.get("retriever"))):
            sources = {**{s: top[s] for s in ("queries", "images_root", "pool", "pool_images_root")}, **own_sources}
            if mode == "rag":
                if retriever not in retrievers:
                    raise InputError(f"rag cells need a retriever named in 'retrievers' (got {retriever!r})",
                                     path=path, field=where)
                sources.update({k2: resolve(k2, v) for k2, v in retrievers[retriever].items()})
            elif retriever is not None:
                raise InputError(f"only rag cells take a retriever (mode {mode})", path=path, field=where)
            name = "" if task == "caption" else f"{task}/"
            name += f"{_slug(str(entry['generator']))}/{mode}-k{k}" + (f"-{_slug(retriever)}" if retriever else "")
            cells.append(Cell(name=name, task=task, generator=str(entry["generator"]), mode=mode, k=int(k),
                              retriever=retriever, sources=sources,
                              options={**options, **cell_opts, **forced}, **meta))
        return cells

    cells: dict[str, Cell] = {}  # by name, in the file's order: the first cell of a name (a later one is dropped)
    for where, entry in entries:
        for cell in entry_cells(where, entry):
            if cell.name in cells and cell.task == "cir":
                raise InputError(f"two cir cells named {cell.name!r}; give each a 'name'", path=path, field=where)
            cells.setdefault(cell.name, cell)
    chosen = [c for c in cells.values() if not only or any(fnmatch.fnmatch(c.name, p) for p in only)]
    if only and not chosen:
        raise ConfigError(f"no cell matches {', '.join(only)}; cells: {', '.join(cells)}")
    return {**spec, **top, "path": str(path)}, chosen
