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
IMAGE_OPTION_KEYS = {"width", "height", "steps", "guidance", "image_seed"}
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

    def settings_of(entry: dict[str, Any], where: str) -> Any:
        """The cell's settings: ``unirag run`` options > the entry's > the grid's (profile and settings)."""
        for part, name in ((spec, "settings"), (entry, f"{where}.settings")):
            if part.get("settings") is not None and not isinstance(part["settings"], dict):
                raise InputError("expected a mapping setting -> value", path=path, field=name)
        given = {**(spec.get("settings") or {}), **(entry.get("settings") or {}), **over.settings}
        try:
            return resolve_settings(over.profile or entry.get("profile") or spec.get("profile") or "default", **given)
        except UniragError as e:
            raise InputError(str(e), path=path, field=where) from None

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
        meta = {"settings": settings_of(entry, where), "paper": {str(k): float(v) for k, v in paper.items()},
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


def run_cell(cell: Cell, out_root: str | Path, progress: bool = True, limit: int | None = None,
             selection: Any = None, engine: Any = "local") -> dict[str, Any]:
    """Run (or resume) one cell into ``out_root/cell.name``. ``selection``: example-selection
    settings (:class:`unirag.Selection`) laid over the cell's own ``selection:`` option, for the
    cells that retrieve from an index; ``engine`` as for a single run (a
    :class:`~unirag.runs.engine.WorkerPool` lets cells with the same model share its workers)."""
    from unirag.runs.atomic import atomic_write_json

    out = Path(out_root) / cell.name
    opts = dict(cell.options)
    if limit is not None:
        opts["limit"] = limit
    if cell.paper or cell.row:
        atomic_write_json(out / "paper.json", cell.paper_record())
    if cell.task == "cir":
        return _run_cir_cell(cell, out, opts, progress, engine)
    opts["selection"] = _cell_selection(cell, opts.get("selection"), selection)
    gen_opts = {k: v for k, v in opts.items() if k in GENERATOR_OPTIONS}
    run_opts = {k: v for k, v in opts.items() if k in RUN_OPTION_KEYS - {"lavit_code", "offload"}}
    if cell.task == "caption":
        from unirag.pipelines.caption import CaptionConfig, run_captioning

        pool_images_root = cell.sources.get("pool_images_root")
        cfg = CaptionConfig(queries=cell.sources["queries"], generator=cell.generator, out=out, mode=cell.mode,
                            k=cell.k, images_root=cell.sources.get("images_root"), pool_images_root=pool_images_root,
                            retrieval=cell.sources.get("retrieval"), index=cell.sources.get("index"),
                            pool=cell.sources.get("pool"), generator_options=gen_opts, progress=progress,
                            profile=cell.settings, engine=engine, **run_opts)
        return run_captioning(cfg)["counts"]
    return _run_image_cell(cell, out, opts, progress, engine)


def _run_cir_cell(cell: Cell, out: Path, opts: dict[str, Any], progress: bool, engine: Any) -> dict[str, Any]:
    """Delegate to :func:`unirag.cir.api.run_cir`; counts as caption cells report them, plus the metrics."""
    from unirag.cir.api import run_cir

    c = cell.cir
    kwargs = {k: c[k] for k in ("split_file", "agents", "k_prime", "lam", "encoder", "exclude_reference")
              if c.get(k) is not None}
    if c.get("stages"):
        from unirag.cir.stages import parse_stages

        kwargs["stages"] = parse_stages(c["stages"])
    metrics = run_cir(c["dataset"], c["annotations"], images_root=cell.sources.get("images_root"), out_dir=out,
                      k=c.get("k"), limit=opts.get("limit"), concurrency=opts.get("concurrency"),
                      decode_workers=opts.get("decode_workers"), progress=progress, profile=cell.settings, echo=lambda s: None, engine=engine, **kwargs)
    final = cir_stage_metrics(metrics, c.get("stage"))
    n = int(final.get("n_queries") or 0) if final else 0
    return {"queries": n, "ok": n, "error": 0, "metrics": {k: v for k, v in (final or {}).items()
                                                           if isinstance(v, int | float)}}


def cir_stage_metrics(metrics: dict[str, Any], stage: str | None = None) -> dict[str, Any] | None:
    """The metrics of one stage (default: X^R's final ``xr``, else the last one run) of a run_cir result;
    for several annotation files (FashionIQ), their average, the way the benchmark is reported."""
    from unirag.cir.stages import STAGE_NAMES

    source = metrics.get("average") if "datasets" in metrics else metrics
    if not isinstance(source, dict):
        return None
    order = [stage] if stage else [s for s in reversed(list(STAGE_NAMES.values()))]
    for name in order:
        if isinstance(source.get(name), dict):
            out = dict(source[name])
            if "datasets" in metrics:
                out.setdefault("n_queries", sum(int((m.get(name) or {}).get("n_queries") or 0)
                                                for m in metrics["datasets"].values()))
            return out
    return None


def _cell_selection(cell: Cell, own: Any, given: Any):
    """The cell's Selection: its ``selection:`` option, with the fields of ``given`` that differ from
    the defaults laid over it when the cell retrieves from an index (run-file cells chose theirs)."""
    from unirag.retrieval.selection import Selection

    base = Selection.of(own)
    if given is None or cell.mode != "rag" or cell.sources.get("index") is None:
        return base
    given, default = Selection.of(given).to_dict(), Selection().to_dict()
    changed = {k: v for k, v in given.items() if v != default[k]}
    if "thresholds" in changed:
        changed["thresholds"] = {**base.to_dict()["thresholds"],
                                 **{k: v for k, v in given["thresholds"].items() if v != default["thresholds"][k]}}
    return Selection.of({**base.to_dict(), **changed})


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
                             seed=opts.get("seed", 0), query_images_root=cell.sources.get("images_root"),
                             profile=cell.settings, selection=opts.get("selection"), supplies="image")
    image = {"steps": None, "guidance": None,  # None: the generator's default under the cell's profile
             **{k: opts[k] for k in ("width", "height", "steps", "guidance") if k in opts}}
    if "image_seed" in opts:
        image["seed"] = opts["image_seed"]
    pool_root = cell.sources.get("pool_images_root") or cell.sources.get("images_root")
    result = run_image_generation(queries, None, selector, out, images_root=pool_root,
                                  settings=ImageSettings(**image), concurrency=opts.get("concurrency", 4),
                                  limit=opts.get("limit"), save_prompts=opts.get("save_prompts", 5),
                                  progress=progress, profile=cell.settings, engine=engine, spec=cell.generator,
                                  decode_workers=opts.get("decode_workers"),
                                  generator_options={k: v for k, v in opts.items()
                                                     if k in GENERATOR_OPTIONS | {"lavit_code", "offload"}})
    # Same shape as caption cells: the final totals of the run directory.
    return {k[len("total_"):]: v for k, v in result.items() if k.startswith("total_")} or result


def cell_states(path: str | Path, only: tuple[str, ...] = (), overrides: GridOverrides | None = None
                ) -> list[tuple[str, str]]:
    """Each selected cell's name and state ("not started", or its run status and ok/queries count),
    read from the cells' run manifests; runs nothing (``unirag run --list``)."""
    from unirag.runs.rundir import read_run_manifest

    spec, cells = load_experiment(path, overrides)
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
                   echo=print, overrides: GridOverrides | None = None, profile: str | None = None,
                   selection: Any = None, engine: Any = "local") -> list[dict[str, Any]]:
    """Run the grid file ``path`` (what ``unirag run`` does): every cell whose name matches a glob of
    ``only`` (all when empty) into ``OUT/<cell name>``, each resumable; ``limit``: the first N queries.
    A cell that fails to start (bad config, no key) is reported and the others go on. Returns one
    ``{"cell", "status": "ok"|"failed", "counts"|"error"}`` per cell. ``overrides``: see
    :class:`GridOverrides`; ``profile``: run every cell under this profile (same as
    ``overrides.profile``). A cir cell's measured figures are printed beside the paper's.

    ``engine="ray"`` (or :class:`~unirag.runs.engine.EngineOptions`): local-model cells run on Ray
    workers of one pool for the whole grid, cells grouped by model so that each worker loads each
    model once for all the cells that use it (API cells run here, as always)."""
    from contextlib import nullcontext
    from dataclasses import replace

    from unirag.runs.atomic import atomic_write_json
    from unirag.runs.engine import WorkerPool, engine_options

    if profile is not None:
        overrides = replace(overrides or GridOverrides(), profile=profile)

    spec, cells = load_experiment(path, overrides)
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
        return _run_cells(spec, cells, progress, limit, echo, shared, selection, atomic_write_json)


def _run_cells(spec, cells, progress, limit, echo, engine, selection, atomic_write_json) -> list[dict[str, Any]]:
    results = []
    for i, cell in enumerate(cells, start=1):
        echo(f"[{i}/{len(cells)}] {cell.name}")
        try:
            counts = run_cell(cell, spec["out"], progress=progress, limit=limit, selection=selection,
                              engine=engine)
            results.append({"cell": cell.name, "status": "ok", "counts": counts})
            submit = cell.task == "cir" and not (counts.get("metrics") or {}).get("n_queries")
            for line in compare_lines(cell.paper, counts.get("metrics") or {}, submit=submit):
                echo(f"  {line}")
        except UniragError as e:
            echo(f"  failed: {e}")
            results.append({"cell": cell.name, "status": "failed", "error": str(e)})
        atomic_write_json(Path(spec["out"]) / "experiment.json", {"experiment": spec["path"], "cells": results})
    return results


def compare_lines(paper: dict[str, float], measured: dict[str, Any], submit: bool = False) -> list[str]:
    """``metric: measured (paper P, Δ D)`` for every paper figure that was measured; with ``submit`` (a
    test split, whose figures come from the benchmark's evaluation server) ``metric: submit (paper P)``."""
    out = []
    for name, figure in paper.items():
        value = measured.get(name)
        if isinstance(value, int | float):
            out.append(f"{name}: {value:.2f} (paper {figure:.2f}, Δ {value - figure:+.2f})")
        elif submit:
            out.append(f"{name}: submit (paper {figure:.2f}; upload the cell's submission files to the "
                       "benchmark's evaluation server)")
    return out
