"""Running an experiment grid (``unirag run GRID``): each cell an ordinary resumable run directory.

Each cell runs into ``OUT/<generator>/<mode>-k<k>[-<retriever>]`` (caption cells), ``OUT/image/...``
or ``OUT/cir/<dataset>/<name>``, so rerunning the experiment after a crash continues every unfinished
cell and skips finished ones. The grid file's format and how it becomes cells:
:mod:`unirag.pipelines.experiment_grid`.
"""

from __future__ import annotations

import functools
from contextlib import nullcontext
from dataclasses import fields
from pathlib import Path
from typing import Any

from unirag.errors import UniragError
from unirag.generators.registry import GENERATOR_OPTIONS
from unirag.pipelines.experiment_grid import (
    Cell,
    GridOverrides,
    load_experiment,
)
from unirag.retrieval.selection import Selection
from unirag.runs.atomic import atomic_write_json
from unirag.runs.engine import WorkerPool, engine_options, with_decode_default
from unirag.runs.rundir import read_run_manifest


def run_cell(cell: Cell, out_root: str | Path, progress: bool = True, limit: int | None = None,
             selection: Any = None, engine: Any = "local") -> dict[str, Any]:
    """Run (or resume) one cell into ``out_root/cell.name``. ``selection``: example-selection
    settings (:class:`unirag.Selection`) laid over the cell's own ``selection:`` option, for the
    cells that retrieve from an index; ``engine`` as for a single run (a
    :class:`~unirag.runs.engine.WorkerPool` lets cells with the same model share its workers)."""
    out = Path(out_root) / cell.name
    opts = dict(cell.options)
    engine = with_decode_default(engine, opts.pop("decode_workers", None))  # the cell's own, unless given
    if limit is not None:
        opts["limit"] = limit
    if cell.paper or cell.row:
        atomic_write_json(out / "paper.json", {"source": cell.source, "row": cell.row, "cell": cell.name,
                                               "paper": dict(cell.paper)})  # for `unirag report`'s paper columns
    if cell.task == "cir":  # run_cir's metrics of one stage (default: X^R's final xr, else the last one run);
        # for several annotation files (FashionIQ) their average, the way the benchmark is reported
        from unirag.cir.api import run_cir
        from unirag.cir.pipeline import STAGE_NAMES

        metrics = run_cir(images_root=cell.sources.get("images_root"), out_dir=out, limit=opts.get("limit"),
                          concurrency=opts.get("concurrency"), progress=progress, profile=cell.settings,
                          echo=lambda s: None, engine=engine, official_prompts=opts.get("official_prompts"),
                          **{k: v for k, v in cell.cir.items()
                             if v is not None and k not in ("name", "stage") and (v or k != "stages")})
        source, final = metrics.get("average") if "datasets" in metrics else metrics, {}
        for name in [cell.cir["stage"]] if cell.cir.get("stage") else reversed(list(STAGE_NAMES.values())):
            if isinstance(source, dict) and isinstance(source.get(name), dict):
                final = dict(source[name])
                if "datasets" in metrics:
                    final.setdefault("n_queries", sum(int((m.get(name) or {}).get("n_queries") or 0)
                                                      for m in metrics["datasets"].values()))
                break
        n = int(final.get("n_queries") or 0)  # counts as caption cells report them, plus the metrics
        return {"queries": n, "ok": n, "error": 0, "metrics": {k: v for k, v in final.items()
                                                               if isinstance(v, int | float)}}
    opts["selection"] = _cell_selection(cell, opts.get("selection"), selection)
    sources = {k: cell.sources.get(k) for k in ("images_root", "pool_images_root", "retrieval", "index", "pool")}
    common = dict(queries=cell.sources["queries"], generator=cell.generator, out=out, mode=cell.mode, k=cell.k,
                  progress=progress, profile=cell.settings, engine=engine, **sources)
    if cell.task == "caption":
        from unirag.pipelines.caption import CaptionConfig as config
        from unirag.pipelines.caption import run_captioning as run
    else:
        from unirag.pipelines.image_gen import ImageConfig as config
        from unirag.pipelines.image_gen import run_images

        run = functools.partial(run_images, record_queries=False)  # grid image cells' identity never named queries
    names = {f.name for f in fields(config)}  # the run options this kind takes (an image cell no max_tokens)
    result = run(config(generator_options={k: v for k, v in opts.items() if k in GENERATOR_OPTIONS}, **common,
                        **{k: v for k, v in opts.items() if k in names}))
    # Both report the final totals of the run directory (caption runs as "counts", image runs as "total_*").
    return result.get("counts") or {k[len("total_"):]: v for k, v in result.items() if k.startswith("total_")} \
        or result


def _cell_selection(cell: Cell, own: Any, given: Any):
    """The cell's Selection: its ``selection:`` option, with the fields of ``given`` that differ from
    the defaults laid over it when the cell retrieves from an index (run-file cells chose theirs)."""
    base = Selection.of(own)
    if given is None or cell.mode != "rag" or cell.sources.get("index") is None:
        return base
    # every field as to_dict has it, a threshold by its own name (so it is laid over the cell's others)
    given, default = ({**d.pop("thresholds"), **d} for d in (Selection.of(given).to_dict(), Selection().to_dict()))
    return Selection.of(base, **{k: v for k, v in given.items() if v != default[k]})


def cell_states(path: str | Path, only: tuple[str, ...] = (), overrides: GridOverrides | None = None
                ) -> list[tuple[str, str]]:
    """Each selected cell's name and state ("not started", or its run status and ok/queries count),
    read from the cells' run manifests; runs nothing (``unirag run --list``)."""
    spec, cells = load_experiment(path, overrides, only)
    states = []
    for cell in cells:
        m = read_run_manifest(Path(spec["out"]) / cell.name) or {}
        c = m.get("counts", {})
        states.append((cell.name, f"{m.get('status')} ({c.get('ok', 0)}/{c.get('queries', '?')} ok)" if m
                       else "not started"))
    return states


def run_experiment(path: str | Path, only: tuple[str, ...] = (), progress: bool = True, limit: int | None = None,
                   echo=print, overrides: GridOverrides | None = None, selection: Any = None,
                   engine: Any = "local") -> list[dict[str, Any]]:
    """Run the grid file ``path`` (what ``unirag run`` does): every cell whose name matches a glob of
    ``only`` (all when empty) into ``OUT/<cell name>``, each resumable; ``limit``: the first N queries.
    A cell that fails to start (bad config, no key) is reported and the others go on. Returns one
    ``{"cell", "status": "ok"|"failed", "counts"|"error"}`` per cell. ``overrides``: see
    :class:`GridOverrides` (``GridOverrides(profile=...)``: every cell under that profile). A cir cell's measured figures are printed beside the paper's.

    ``engine="ray"`` (or :class:`~unirag.runs.engine.EngineOptions`): local-model cells run on Ray
    workers of one pool for the whole grid, cells grouped by model so that each worker loads each
    model once for all the cells that use it (API cells run here, as always)."""
    spec, cells = load_experiment(path, overrides, only)
    options = engine_options(engine)
    if options.ray and not isinstance(engine, WorkerPool):
        groups: dict[tuple, list[Cell]] = {}
        for c in cells:  # cells with equal keys use the same loaded model (task kind, spec, generator options)
            opts = sorted((k, str(v)) for k, v in c.options.items() if k in GENERATOR_OPTIONS)
            groups.setdefault((c.task, c.generator, tuple(opts)), []).append(c)
        cells = [c for group in groups.values() for c in group]  # the file's order within a model
        context = WorkerPool(options)
    else:
        context = nullcontext(engine)
    results: list[dict[str, Any]] = []
    with context as engine:
        for i, cell in enumerate(cells, start=1):
            echo(f"[{i}/{len(cells)}] {cell.name}")
            try:
                counts = run_cell(cell, spec["out"], progress=progress, limit=limit, selection=selection,
                                  engine=engine)
                results.append({"cell": cell.name, "status": "ok", "counts": counts})
                # every paper figure that was measured, beside the measured one; a cir cell on a test split
                # (its figures come from the benchmark's evaluation server): where to submit it
                measured = counts.get("metrics") or {}
                for name, figure in cell.paper.items():
                    value = measured.get(name)
                    if isinstance(value, int | float):
                        echo(f"  {name}: {value:.2f} (paper {figure:.2f}, Δ {value - figure:+.2f})")
                    elif cell.task == "cir" and not measured.get("n_queries"):
                        echo(f"  {name}: submit (paper {figure:.2f}; upload the cell's submission files to the "
                             "benchmark's evaluation server)")
            except UniragError as e:
                echo(f"  failed: {e}")
                results.append({"cell": cell.name, "status": "failed", "error": str(e)})
            atomic_write_json(Path(spec["out"]) / "experiment.json", {"experiment": spec["path"], "cells": results})
    return results
