"""Image runs on Ray with a tiny random diffusers pipeline: the same PNGs and records as a local run,
and a ``unirag generate-images --engine ray`` driver killed mid-run resumes without drawing a finished
picture again."""

from __future__ import annotations

import json
import re
import signal
import subprocess
from pathlib import Path

import numpy as np
from PIL import Image
from tests_engine_helpers import UNIRAG, wait_for_records

from ray_cluster import wait_until_idle
from unirag.pipelines.image_gen import ImageConfig, run_images
from unirag.runs.engine import EngineOptions

SETTINGS = dict(width=32, height=32, steps=2, guidance=3.0, image_seed=7)
FIELDS = ("qid", "caption", "status", "examples", "image", "size")


def _pixels(path: Path) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB")).copy()


def _records(out: Path) -> list[dict]:
    from tests_engine_helpers import read_records

    return read_records(out, FIELDS)


def _same_pictures(a: Path, b: Path) -> None:
    ra, rb = _records(a), _records(b)
    assert ra == rb and all(r["status"] == "ok" for r in ra)
    for r in ra:
        assert np.array_equal(_pixels(a / r["image"]), _pixels(b / r["image"])), r["qid"]


def test_ray_run_draws_the_pictures_of_a_local_run(coco_caption_set, ray_cluster, tmp_path):
    from tiny_models import tiny_sd_dir

    address, _ = ray_cluster
    spec = f"diffusers:{tiny_sd_dir()}"

    def cfg(out, engine):
        return ImageConfig(queries=coco_caption_set["text_queries"], generator=spec, out=out, limit=6,
                           **SETTINGS, generator_options={"device": "cpu"}, engine=engine, progress=False)

    local = run_images(cfg(tmp_path / "local", "local"))
    # Same torch thread count as this process: a float sum over 1 or 2 threads may round differently.
    import torch

    ray = run_images(cfg(tmp_path / "ray", EngineOptions(engine="ray", workers=2, ray_address=address,
                                                         threads_per_worker=torch.get_num_threads(),
                                                         decode_workers=1)))
    assert local["total_ok"] == ray["total_ok"] == 6 and ray["ok"] == 6
    _same_pictures(tmp_path / "local", tmp_path / "ray")
    ma, mb = (json.loads((tmp_path / d / "manifest.json").read_text()) for d in ("local", "ray"))
    assert ma["identity"] == mb["identity"]
    assert sorted(p.name for p in (tmp_path / "ray/prompts").iterdir()) == \
        sorted(p.name for p in (tmp_path / "local/prompts").iterdir())


def test_driver_killed_then_rerun_draws_no_finished_picture_again(coco_caption_set, ray_cluster, tmp_path):
    from tiny_models import tiny_sd_dir

    address, env = ray_cluster
    env = {**env, "UNIRAG_TORCH_THREADS": "1"}  # local and workers sum floats over the same threads
    out = tmp_path / "ray"
    n = 12
    cmd = UNIRAG + ["generate-images", "--queries", str(coco_caption_set["text_queries"]),
                    "--generator", f"diffusers:{tiny_sd_dir()}", "--width", "32", "--height", "32", "--steps", "2",
                    "--guidance", "3.0", "--set", "image_seed=7", "--limit", str(n), "--no-progress"]
    local_cmd = cmd + ["--out", str(tmp_path / "local")]
    cmd = cmd + ["--out", str(out)]
    first = subprocess.Popen(cmd + ["--engine", "ray", "--workers", "2", "--ray-address", address], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_for_records(out / "outputs.jsonl", 4, first)
    first.send_signal(signal.SIGKILL)
    first.wait()
    wait_until_idle(address, env)  # the killed driver's workers released
    stored = [json.loads(x) for x in (out / "outputs.jsonl").read_text().splitlines() if x.endswith("}")]
    assert 4 <= len(stored) < n
    stamps = {r["image"]: (out / r["image"]).stat().st_mtime_ns for r in stored}
    second = subprocess.run(cmd + ["--engine", "ray", "--workers", "2", "--ray-address", address], env=env,
                            capture_output=True, text=True, timeout=400)
    assert second.returncode == 0, second.stderr[-3000:]
    done = re.search(r"this run: (\d+) new, (\d+) failed, (\d+) already done", second.stdout)
    assert done and (int(done[1]), int(done[2]), int(done[3])) == (n - len(stored), 0, len(stored)), second.stdout
    for image, stamp in stamps.items():  # the pictures finished before the kill were not drawn again
        assert (out / image).stat().st_mtime_ns == stamp, image
    subprocess.run(local_cmd, env=env, check=True, capture_output=True, timeout=400)
    _same_pictures(tmp_path / "local", out)
