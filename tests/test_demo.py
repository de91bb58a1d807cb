"""`make demo`'s job end to end on the bundled sample: every stage's output exists and is sane."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from html.parser import HTMLParser


class _Cards(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.imgs = 0

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.imgs += 1


# the code under test, also from a checkout that is not the installed one (PYTHONPATH=src)
ENV = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin",
       **({"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {})}


def test_demo_runs_offline_and_reruns_from_saved_outputs(tmp_path):
    out = tmp_path / "demo"
    proc = subprocess.run([sys.executable, "-m", "unirag.demo", "--out", str(out)], capture_output=True, text=True,
                          env=ENV)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Summary" in proc.stdout
    i2t = json.loads((out / "runs" / "image2text.metrics.json").read_text())["metrics"]
    t2i = json.loads((out / "runs" / "text2image.metrics.json").read_text())["metrics"]
    # 51 images / 255 captions: chance hit@10 is about 0.2 in both directions.
    assert i2t["hit@10"] > 0.5 and t2i["hit@10"] > 0.5
    caps = [json.loads(line) for line in (out / "runs" / "caption-consensus-rag-k5" / "outputs.jsonl").open()]
    assert len(caps) == 51 and all(c["status"] == "ok" and c["caption"] for c in caps)
    # Leakage-free: no example caption is one of the query image's own captions.
    queries = {json.loads(x)["qid"]: json.loads(x) for x in
               (out / "data" / "queries_task3_image2text.jsonl").read_text().splitlines()}
    for c in caps:
        assert not {e["text_did"] for e in c["examples"]} & set(queries[c["qid"]]["pos_cand_list"])
    metrics = json.loads((out / "runs" / "caption-consensus-rag-k5" / "metrics.json").read_text())["metrics"]
    assert 0 < metrics["CIDEr"] < 200
    parser = _Cards()
    parser.feed((out / "report" / "gallery" / "caption-consensus-rag-k5.html").read_text())
    assert parser.imgs >= 51 * 2  # query image + examples per card

    # every evaluated metric carries its 95 % interval; the report compares the two caption runs
    for run in ("image2text", "text2image"):
        evaluation = json.loads((out / "runs" / f"{run}.metrics.json").read_text())
        assert set(evaluation["intervals"]) == {m for m in evaluation["metrics"] if "@" in m}
    evaluation = json.loads((out / "runs" / "caption-consensus-rag-k5" / "metrics.json").read_text())
    assert set(evaluation["intervals"]) == set(evaluation["metrics"])
    assert proc.stdout.count("95% CI:") == 4  # two retrieval and two caption evaluations
    table = (out / "report" / "tables" / "compare_caption_queries_task3_image2text.md").read_text()
    assert "Differences from the baseline" in proc.stdout and "| 5 | 51 |" in table and "Holm" in table

    again = subprocess.run([sys.executable, "-m", "unirag.demo", "--out", str(out)], capture_output=True, text=True,
                           env=ENV)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "unirag index build" not in again.stdout  # the finished index is reused
    assert again.stdout.count("(reusing") == 5  # three retrieval runs and both caption scores
    assert (again.stdout + again.stderr).count('"skipped": 51') == 2  # both caption runs resume with nothing left to do
