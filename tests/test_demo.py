"""`make demo`'s job end to end on the bundled sample: every stage's output exists and is sane."""

from __future__ import annotations

import json
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


def test_demo_runs_offline_and_reruns_from_saved_outputs(tmp_path):
    out = tmp_path / "demo"
    proc = subprocess.run([sys.executable, "-m", "unirag.demo", "--out", str(out)], capture_output=True, text=True,
                          env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
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

    again = subprocess.run([sys.executable, "-m", "unirag.demo", "--out", str(out)], capture_output=True, text=True,
                           env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    assert again.returncode == 0, again.stderr[-3000:]
    assert "unirag index build" not in again.stdout  # the finished index is reused
    assert "(reusing" in again.stdout
    assert (again.stdout + again.stderr).count('"skipped": 51') == 2  # both caption runs resume with nothing left to do
