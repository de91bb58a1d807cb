"""``unirag run GRID --engine ray``: a local Ray started on this 2-core machine (default worker count:
its CPUs), the grid's cells as Ray work, each worker loading each model once for all its cells."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from ray_cluster import private_token
from unirag.pipelines.experiment import run_experiment
from unirag.runs.engine import EngineOptions

GRID = """\
out: {out}
queries: {queries}
images_root: {images_root}
retrievers: {{run: {{retrieval: {run}}}}}
generators: [python:engine_plugins:make_captioner, python:engine_plugins:make_captioner3]
grid:
  - {{mode: zero-shot, k: 0}}
  - {{mode: rag, k: [1, 2], retriever: run}}
"""


def _write(data: dict, tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(GRID.format(out=tmp_path / name, queries=data["queries"], images_root=data["images_root"],
                                run=data["run"]))
    return path


@pytest.mark.ray  # starts a local Ray itself: the behaviour under test
def test_grid_on_a_local_ray_loads_each_model_once_per_worker(coco_caption_set, tmp_path, monkeypatch):
    import ray
    from tests_engine_helpers import read_records

    loads = tmp_path / "loads.log"
    monkeypatch.setenv("UNIRAG_TEST_LOADS", str(loads))
    with private_token(tmp_path / "auth_token"):
        results = run_experiment(_write(coco_caption_set, tmp_path, "ray"), progress=False, echo=lambda _: None,
                                 engine=EngineOptions(engine="ray", object_store_memory=100 * 1024 * 1024))
    assert not ray.is_initialized(), "the Ray started for the grid is stopped afterwards"
    assert [r["status"] for r in results] == ["ok"] * 6
    assert all(r["counts"]["ok"] == coco_caption_set["n"] for r in results)
    # 2 CPUs -> 2 workers by default; 2 models (batch size 2 and 3) -> each loaded once on each worker
    # for its three cells, in worker processes (not this driver).
    per_model = Counter(line.split()[1] for line in loads.read_text().splitlines())
    assert per_model == {"2": 2, "3": 2}, loads.read_text()
    assert str(os.getpid()) not in {line.split()[0] for line in loads.read_text().splitlines()}

    monkeypatch.delenv("UNIRAG_TEST_LOADS")
    local = run_experiment(_write(coco_caption_set, tmp_path, "local"), progress=False, echo=lambda _: None)
    assert sorted(r["cell"] for r in local) == sorted(r["cell"] for r in results)
    for r in results:
        assert read_records(tmp_path / "ray" / r["cell"]) == read_records(tmp_path / "local" / r["cell"]), r["cell"]
