"""scripts/gpu_smoke.py in its CPU dry mode: every step runs and reports its timing and agreement numbers."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_smoke_dry_mode_on_cpu(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_smoke.py"), "--device", "cpu", "--images", "6",
                           "--work", str(tmp_path)], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = [dict(re.findall(r"(\w+)=(\S+)", line)) for line in proc.stdout.splitlines() if line.startswith("step=")]
    steps = [(x["step"], x.get("encoder")) for x in lines]
    assert steps == [("index", "clip"), ("index", "uniir-clip-sf"), ("caption", None), ("diffusers", None),
                     ("xr", None)]
    assert all(x["device"] == "cpu" and x["dtype"] == "bfloat16" and x["peak_gpu_mib"] == "n/a" for x in lines)
    assert all(float(x["seconds"]) > 0 for x in lines)
    for x in lines[:2]:  # bfloat16 retrieval agrees with float32 on most of the top-5, and is not refused
        assert x["queries"] == "6"
        assert 0.6 <= float(x["top5_overlap_vs_cpu_fp32"]) <= 1 and 0.6 <= float(x["cpu_fp32_index_top5_overlap"]) <= 1
    cap, dif, xr = lines[2], lines[3], lines[4]
    assert cap["batch"] == "4" and 0 <= float(cap["same_as_cpu_fp32"]) <= 1
    assert dif["images"] == "3" and 0 <= float(dif["mean_abs_pixel_diff_vs_cpu_fp32"]) < 40
    assert "baseline" in xr["stages"]
    assert proc.stdout.rstrip().splitlines()[-1].startswith("SMOKE OK")
