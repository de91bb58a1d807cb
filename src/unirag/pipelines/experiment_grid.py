"""Reading an experiment grid file: the YAML, its paths, retrievers, options and entries.

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
where data is and which generators run without editing the file.

The loader is split by what each part reads: this module reads the file (:func:`read_grid`);
:mod:`unirag.pipelines.experiment_cells` turns its entries into cells (settings, sources, options);
:mod:`unirag.pipelines.experiment_plan` checks each cell's inputs on disk (``--dry-run``);
:mod:`unirag.pipelines.experiment` runs the cells.
"""


from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unirag.data.text import read_text
from unirag.errors import InputError
from unirag.generators.registry import GENERATOR_OPTIONS

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
class Grid:
    """A grid file as read: the YAML mapping, where its relative paths start, the top-level sources,
    retrievers and options, and its entries (grid rows and cells, one generator each, ``_where``
    naming the place in the file for error messages)."""

    spec: dict[str, Any]
    path: Path
    base: Path
    overrides: GridOverrides
    top: dict[str, Any]
    retrievers: dict[str, Any]
    #: the grid's options with ``unirag run --option`` over them; ``forced``: the latter alone (they win
    #: over every cell's own)
    options: dict[str, Any]
    forced: dict[str, Any]
    entries: list[dict[str, Any]] = field(default_factory=list)

    @property
    def default_task(self) -> str:
        return self.spec.get("task", "caption")

    def resolve(self, key: str, value: Any) -> Any:
        """A value as the grid means it: a path key's relative path starts at the file's folder (or
        ``--data-root``)."""
        if key in PATH_KEYS and isinstance(value, list | tuple):
            return [self.resolve(key, v) for v in value]
        if key in PATH_KEYS and value is not None:
            p = Path(str(value)).expanduser()
            return str(p if p.is_absolute() else self.base / p)
        return value


def _as_list(v: Any) -> list:
    return list(v) if isinstance(v, list | tuple) else [v]


def read_grid(path: str | Path, overrides: GridOverrides | None = None) -> Grid:
    """Read and check a grid file's top level and collect its entries. Errors name the file and key."""
    import yaml

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
    grid = Grid(spec, path, base, over, {}, {}, {}, {})
    needs_queries = grid.default_task != "cir" or any(
        isinstance(e, dict) and e.get("task", grid.default_task) != "cir"
        for e in [*(spec.get("grid") or []), *(spec.get("cells") or [])])
    for key in ("out", "queries") if needs_queries else ("out",):
        if not spec.get(key):
            raise InputError("missing required key", path=path, field=key)
    grid.top = {k: grid.resolve(k, spec.get(k)) for k in ("out", "queries", "images_root", "pool", "pool_images_root")}
    if over.out is not None:
        grid.top["out"] = str(Path(over.out).resolve())
    grid.retrievers = spec.get("retrievers") or {}
    if not isinstance(grid.retrievers, dict):
        raise InputError("expected a mapping name -> {retrieval: RUN} or {index: DIR}", path=path, field="retrievers")
    for name, src in grid.retrievers.items():
        if not isinstance(src, dict) or len(set(src) & {"retrieval", "index"}) != 1:
            raise InputError("each retriever needs exactly one of 'retrieval' or 'index'", path=path,
                             field=f"retrievers.{name}")
    grid.options = {k: grid.resolve(k, v) for k, v in {**(spec.get("options") or {}), **over.options}.items()}
    grid.forced = {k: grid.resolve(k, v) for k, v in over.options.items()}
    _check_option_keys(grid.options, path, "options")
    grid.entries = _entries(grid)
    return grid


def _entries(grid: Grid) -> list[dict[str, Any]]:
    """The grid rows (one per generator) and the explicit cells, ``generator`` replaced as asked."""
    spec, path = grid.spec, grid.path
    entries: list[dict[str, Any]] = []
    for i, entry in enumerate(spec.get("grid") or []):
        if not isinstance(entry, dict):
            raise InputError("grid entries must be mappings", path=path, field=f"grid[{i}]")
        for gen in _as_list(entry.get("generator", spec.get("generators") or [])):
            entries.append({**entry, "generator": gen, "_where": f"grid[{i}]"})
    for i, entry in enumerate(spec.get("cells") or []):
        if isinstance(entry, dict) and entry.get("task", grid.default_task) == "cir":
            entries.append({**entry, "generator": entry.get("generator", "xr" if entry.get("agents") else "baseline"),
                            "mode": "cir", "_where": f"cells[{i}]"})
            continue
        if not isinstance(entry, dict) or "generator" not in entry:
            raise InputError("cells need a generator", path=path, field=f"cells[{i}]")
        for gen in _as_list(entry["generator"]):
            entries.append({**entry, "generator": gen, "_where": f"cells[{i}]"})
    for entry in entries:
        entry["generator"] = grid.overrides.generators.get(str(entry["generator"]), entry["generator"])
    if not entries:
        raise InputError("no cells: give 'generators' and 'grid', or 'cells'", path=path)
    return entries


def _check_option_keys(opts: dict[str, Any], path: Path, where: str) -> None:
    allowed = GENERATOR_OPTIONS | RUN_OPTION_KEYS | IMAGE_OPTION_KEYS | CIR_OPTION_KEYS
    bad = set(opts) - allowed
    if bad:
        raise InputError(f"unknown option(s) {', '.join(sorted(bad))}; allowed: {', '.join(sorted(allowed))}",
                         path=path, field=where)
