"""benchmarks/bench_gpu.py in its dry mode (``--device cpu --tiny``): every model and measurement runs
and lands in the JSON and the printed table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_gpu_dry_mode_on_cpu(tmp_path):
    out = tmp_path / "bench.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_gpu.py"), "--device", "cpu", "--tiny",
                           "--out", str(out), "--coco", str(tmp_path / "no-such-folder")],
                          capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(out.read_text())
    records = data["records"]
    assert data["machine"]["tiny"] is True
    models = {r["model"] for r in records}
    assert models == {"clip-l14-224", "clip-l14-336", "uniir-clip-sf-large", "uniir-blip-ff-large",
                      "llava-1.5-7b-merged", "interleaved-7b", "sd15-tiny"}
    assert all(r["value"] > 0 and r["dtype"] == "bfloat16" and r["peak_gpu_mib"] is None for r in records)
    pipelines = [r for r in records if r["what"] == "pipeline"]
    assert {r["model"] for r in pipelines} == {"clip-l14-224", "clip-l14-336", "uniir-blip-ff-large"}
    assert all(r["extra"]["decode_workers"] >= 1 and r["extra"]["vs_model"] > 0 for r in pipelines)
    for vlm, images in (("llava-1.5-7b-merged", [1, 1, 1]), ("interleaved-7b", [1, 2, 6])):
        rows = [r for r in records if r["model"] == vlm]
        assert [r["what"] for r in rows] == ["k=0", "k=1", "k=5"] and all(r["unit"] == "captions/s" for r in rows)
        assert [r["extra"]["images"] for r in rows] == images  # merged: one image; interleaved: k + 1
    table = [line for line in proc.stdout.splitlines() if line.startswith(("clip-l14-224", "sd15-tiny"))]
    assert len(table) == 3 and "s/image" in table[-1]
