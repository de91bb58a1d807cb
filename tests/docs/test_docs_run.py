"""Every ```python block of the README and of the docs pages runs as written on the bundled sample,
and so do the README's shell example and ``examples/quickstart.py`` (so none of them can rot).

A page's blocks run in order as one script, in a fresh folder; a block that must not run is fenced
as ``text`` (docs/development.md, "Docs")."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from docs_markdown import REPO, fenced_blocks, page_id, pages, python_blocks

PYTHON_PAGES = [p for p in pages() if python_blocks(p.read_text(encoding="utf-8"))]
HIT_LINE = re.compile(r"^\d\.\d{3}  ")


def _run(args: list[str], cwd: Path) -> str:
    out = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def _readme(out: str, tmp: Path) -> None:
    lines = out.strip().splitlines()
    hits = [ln.split("  ", 1)[1] for ln in lines if HIT_LINE.match(ln)]
    assert len(hits) == 5
    assert lines[-1] in hits  # the consensus captioner picks one of the retrieved captions
    photo_captions = {a["caption"].strip() for a in _sample_captions() if a["image_id"] == 397133}
    assert not photo_captions & {h.strip() for h in hits}  # exclude= kept the photo's own captions out


def _python_api(out: str, tmp: Path) -> None:
    assert (tmp / "demo-index" / "manifest.json").exists()
    lines = out.strip().splitlines()
    assert lines[-1] == "1.0 1.0"  # the photo's own caption is the top hit in the metric example
    assert len([ln for ln in lines if HIT_LINE.match(ln)]) == 3  # the three printed hits
    # the quickstart reuses that index, prints five leakage-free hits and a caption
    quick = _run([str(REPO / "examples" / "quickstart.py"), "--index", "demo-index"], tmp)
    hits = [ln for ln in quick.splitlines() if re.match(r"^\d\.\d{3}  coco:", ln)]
    assert len(hits) == 5 and "coco:txt:375891" not in quick.split("caption:")[0]
    caption = quick.split("caption: ", 1)[1].splitlines()[0]
    assert caption in quick.split("caption:")[0]  # the consensus captioner picks one of the examples


# what a page's output must show, beyond running without an error (pages without an entry: that alone)
CHECKS = {"README.md": _readme, "docs/python-api.md": _python_api}


def _sample_captions() -> list[dict]:
    return json.loads((REPO / "src/unirag/demo/data/captions.json").read_text(encoding="utf-8"))["annotations"]


def test_the_pages_with_python_are_found():
    found = {page_id(p) for p in PYTHON_PAGES}
    assert {"README.md", "docs/python-api.md", "docs/leakage-free.md", "docs/commands/import.md",
            "docs/commands/evaluate.md"} <= found
    assert set(CHECKS) <= found


def test_no_python_block_escapes_the_run_by_another_fence_name():
    """Python is fenced ``python`` (run) or ``text`` (not run): ``py``, ``pycon`` ... would silently skip."""
    odd = [(page_id(p), lang) for p in pages() for lang, _ in fenced_blocks(p.read_text(encoding="utf-8"))
           if lang in ("py", "python3", "pycon", "ipython", "py3")]
    assert odd == []


@pytest.mark.slow
@pytest.mark.parametrize("page", PYTHON_PAGES, ids=page_id)
def test_page_python_blocks_run(page, tmp_path):
    blocks = python_blocks(page.read_text(encoding="utf-8"))
    (tmp_path / "page.py").write_text("\n".join(blocks), encoding="utf-8")
    out = _run(["page.py"], tmp_path)
    CHECKS.get(page_id(page), lambda out, tmp: None)(out, tmp_path)


@pytest.mark.slow
def test_readme_shell_example_runs(tmp_path):
    """The README's command-line example, from a folder that looks like the repository root."""
    (block,) = [body for lang, body in fenced_blocks((REPO / "README.md").read_text(encoding="utf-8"))
                if lang == "bash" and "unirag import" in body]
    (tmp_path / "src").symlink_to(REPO / "src")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path, capture_output=True, text=True,
                          timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    qrels: dict[str, set[str]] = {}
    for line in (tmp_path / "data/sample/qrels_task3.txt").read_text().splitlines():
        qid, _, did, *_ = line.split()
        qrels.setdefault(qid, set()).add(did)
    runs = [json.loads(x) for x in (tmp_path / "runs/i2t.noleak.jsonl").read_text().splitlines()]
    assert len(runs) == 51 and all(len(r["pairs"]) == 5 for r in runs)
    assert not any(p["text_did"] in qrels[r["qid"]] for r in runs for p in r["pairs"])  # leakage-free
    outputs = [json.loads(x) for x in (tmp_path / "runs/rag-k5/outputs.jsonl").read_text().splitlines()]
    assert len(outputs) == 51 and all(o["status"] == "ok" and o["caption"] for o in outputs)
