"""The README's Python API section and ``examples/quickstart.py`` run as written (so they cannot rot)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def python_blocks(markdown: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", markdown, flags=re.S | re.M)


def _run(args: list[str], cwd: Path) -> str:
    out = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_readme_python_blocks_and_quickstart_run(tmp_path):
    blocks = python_blocks((REPO / "README.md").read_text(encoding="utf-8"))
    assert len(blocks) >= 3 and any("unirag.Retriever" in b for b in blocks)
    (tmp_path / "readme.py").write_text("\n".join(blocks), encoding="utf-8")
    readme_out = _run(["readme.py"], tmp_path)
    assert (tmp_path / "demo-index" / "manifest.json").exists()
    lines = readme_out.strip().splitlines()
    assert lines[-1] == "1.0 1.0"  # the photo's own caption is the top hit in the metric example
    assert len([ln for ln in lines if re.match(r"^\d\.\d{3}  ", ln)]) == 3  # the three printed hits
    # the quickstart reuses that index, prints five leakage-free hits and a caption
    quick = _run([str(REPO / "examples" / "quickstart.py"), "--index", "demo-index"], tmp_path)
    hits = [ln for ln in quick.splitlines() if re.match(r"^\d\.\d{3}  coco:", ln)]
    assert len(hits) == 5 and "coco:txt:375891" not in quick.split("caption:")[0]
    caption = quick.split("caption: ", 1)[1].splitlines()[0]
    assert caption in quick.split("caption:")[0]  # the consensus captioner picks one of the examples
