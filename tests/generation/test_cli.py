"""The ``caption`` and ``run`` commands: kill-and-resume in a subprocess, grid runs, one-line errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from fake_openai_server import FakeServer, Reply
from unirag.cli.main import cli
from unirag.errors import InputError

REPO = Path(__file__).resolve().parents[2]


def _caption_args(coco_set, out, url, extra=()):
    return ["caption", "--queries", str(coco_set["queries"]), "--images-root", str(coco_set["images_root"]),
            "--generator", "openai:gpt-4o", "--mode", "rag", "--k", "2", "--retrieval", str(coco_set["run"]),
            "--out", str(out), "--base-url", url, "--no-progress", *extra]


def test_killed_run_resumes_complete_and_duplicate_free(coco_set, no_api_keys, tmp_path):
    out = tmp_path / "run"
    n = len(coco_set["rows"])
    with FakeServer(latency=0.25) as srv:
        env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
        cmd = [sys.executable, "-m", "unirag", *_caption_args(coco_set, out, srv.url, ["--concurrency", "2"])]
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        outputs = out / "outputs.jsonl"
        deadline = time.time() + 60
        while time.time() < deadline:
            if outputs.exists() and len(outputs.read_text().splitlines()) >= 3:
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)  # a crash: no cleanup at all
        proc.wait(timeout=10)
        partial = outputs.read_text().splitlines()
        assert 3 <= len(partial) < n, "the kill must land mid-run"
        asked_before = len(srv.requests)

        srv.latency = 0.0
        result = CliRunner().invoke(cli, _caption_args(coco_set, out, srv.url, ["--concurrency", "4"]))
        assert result.exit_code == 0, result.output
        assert f"{n}/{n} captioned" in result.output
        recs = [json.loads(x) for x in outputs.read_text().splitlines()]
        assert [r["qid"] for r in recs] == [f"q{r['image_id']}" for r in coco_set["rows"]]  # complete, ordered, once
        assert all(r["status"] == "ok" for r in recs)
        done_before = {json.loads(x)["qid"] for x in partial}
        # the rerun asked only for queries that had not finished
        assert len(srv.requests) - asked_before == n - len(done_before)


def test_run_grid_with_offline_and_api_cells(coco_set, no_api_keys, tmp_path):
    exp = tmp_path / "grid.yaml"
    exp.write_text(f"""
out: out
queries: {coco_set['queries']}
images_root: {coco_set['images_root']}
pool: {coco_set['pool']}
retrievers:
  fake: {{retrieval: {coco_set['run']}}}
generators: ["openai:gpt-4o"]
options: {{concurrency: 2, limit: 3}}
grid:
  - {{mode: zero-shot, k: 0}}
  - {{mode: random, k: 1}}
  - {{mode: rag, k: [1, 2], retriever: fake}}
cells:
  - {{generator: "retrieval:top1", mode: rag, k: 1, retriever: fake}}
  - {{generator: "retrieval:consensus", mode: rag, k: 5, retriever: fake, similarity: lexical}}
""")
    runner = CliRunner()
    with FakeServer() as srv:
        os.environ["OPENAI_BASE_URL"] = srv.url
        try:
            result = runner.invoke(cli, ["run", str(exp), "--no-progress"])
        finally:
            del os.environ["OPENAI_BASE_URL"]
        assert result.exit_code == 0, result.output
        assert "6/6 cells ran; 0 with failed queries" in result.output
        assert len(srv.requests) == 4 * 3
    cells = sorted(str(p.parent.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("manifest.json"))
    assert cells == ["openai-gpt-4o/rag-k1-fake", "openai-gpt-4o/rag-k2-fake", "openai-gpt-4o/random-k1",
                     "openai-gpt-4o/zero-shot-k0", "retrieval-consensus/rag-k5-fake", "retrieval-top1/rag-k1-fake"]
    top1 = [json.loads(x) for x in (tmp_path / "out/retrieval-top1/rag-k1-fake/outputs.jsonl").read_text().splitlines()]
    rows = coco_set["rows"]
    assert [r["caption"] for r in top1] == [rows[1]["captions"][0], rows[2]["captions"][0], rows[3]["captions"][0]]
    listing = runner.invoke(cli, ["run", str(exp), "--list"])
    assert "openai-gpt-4o/zero-shot-k0" in listing.output and "complete (3/3 ok)" in listing.output


def test_grid_file_errors_name_the_key(tmp_path):
    exp = tmp_path / "g.yaml"
    exp.write_text("out: o\nqueries: q.jsonl\ngenerators: [openai:gpt-4o]\ngrid:\n  - {mode: rag, k: 1, retriever: x}\n")
    result = CliRunner().invoke(cli, ["run", str(exp)])
    assert result.exit_code != 0
    assert "grid[0]" in str(result.exception) and "retriever" in str(result.exception)
    exp.write_text("out: o\nqueries: q.jsonl\nbogus: 1\n")
    result = CliRunner().invoke(cli, ["run", str(exp)])
    assert "unknown key(s) bogus" in str(result.exception)
    for text, message in [("grid: [", "malformed YAML"), ("- a list", "expected a mapping at the top level")]:
        exp.write_text(text)
        result = CliRunner().invoke(cli, ["run", str(exp)])
        assert isinstance(result.exception, InputError) and message in str(result.exception) and "g.yaml" in str(result.exception)


def test_caption_cli_one_line_error_for_bad_spec(coco_set, tmp_path, capsys):
    from cli_capture import main_result

    code, _, err = main_result(["caption", "--queries", str(coco_set["queries"]), "--generator", "nope:model",
                                "--mode", "zero-shot", "--out", str(tmp_path / "o")], capsys)
    assert code == 2
    assert err.strip().startswith("error: unknown generator spec 'nope:model'")
    assert "Traceback" not in err


@pytest.mark.parametrize("args, match", [(["--mode", "rag", "--k", "1"], "exactly one of --retrieval")])
def test_caption_cli_option_errors(coco_set, tmp_path, args, match):
    result = CliRunner().invoke(cli, ["caption", "--queries", str(coco_set["queries"]), "--out", str(tmp_path / "o"),
                                      "--generator", "retrieval:top1", *args])
    assert match in str(result.exception)


def test_fake_server_scripting_order():
    with FakeServer(responder=lambda r: Reply.chat("from responder")) as srv:
        srv.push(Reply.chat("scripted"))
        import urllib.request

        def post():
            req = urllib.request.Request(srv.url + "/chat/completions", data=b'{"x": 1}', method="POST")
            return json.loads(urllib.request.urlopen(req).read())["choices"][0]["message"]["content"]

        assert [post(), post()] == ["scripted", "from responder"]
        assert srv.requests[0].json == {"x": 1} and srv.requests[0].path == "/v1/chat/completions"


def test_run_grid_image_cell_uses_the_image_pipeline(coco_set, tmp_path):
    from unirag.data.mbeir import write_queries
    from unirag.data.records import Modality, Query

    rows = coco_set["rows"][:4]
    write_queries(tmp_path / "t2i.jsonl", [Query(qid=f"t{r['image_id']}", modality=Modality.TEXT, txt=r["captions"][0],
                                                 pos_cand_list=[f"img{r['image_id']}"]) for r in rows])
    lines = []
    for i, r in enumerate(rows):
        o = rows[(i + 1) % len(rows)]
        pair = {"image_did": f"img{o['image_id']}", "text_did": f"txt{o['image_id']}_0", "img_path": o["image"],
                "txt": o["captions"][0]}
        lines.append(json.dumps({"qid": f"t{r['image_id']}", "candidates": [], "pairs": [pair]}))
    (tmp_path / "t2i_run.jsonl").write_text("\n".join(lines) + "\n")
    exp = tmp_path / "grid.yaml"
    exp.write_text(f"""
out: out
queries: {coco_set['queries']}
images_root: {coco_set['images_root']}
retrievers: {{fake: {{retrieval: t2i_run.jsonl}}}}
cells:
  - {{task: image, generator: "retrieval:top1", mode: rag, k: 1, retriever: fake, queries: t2i.jsonl}}
""")
    result = CliRunner().invoke(cli, ["run", str(exp), "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "1/1 cells ran; 0 with failed queries" in result.output
    cell = tmp_path / "out" / "image" / "retrieval-top1" / "rag-k1-fake"
    recs = [json.loads(x) for x in (cell / "outputs.jsonl").read_text().splitlines()]
    assert [r["qid"] for r in recs] == [f"t{r['image_id']}" for r in rows] and all(r["status"] == "ok" for r in recs)
    from PIL import Image

    first = Image.open(cell / recs[0]["image"])
    assert first.size == (rows[1]["width"], rows[1]["height"])  # the top-1 retrieved example's image


def test_run_decode_workers_reach_every_cell_and_the_ray_workers(coco_set, tmp_path, monkeypatch):
    """``unirag run --decode-workers N`` is the engine options' decode workers of every cell (its local loop
    and its Ray workers); without it a cell's engine takes its own ``options: {decode_workers: ...}``."""
    from unirag.pipelines import caption
    from unirag.runs.engine import engine_options

    seen = []
    monkeypatch.setattr(caption, "run_captioning", lambda cfg: seen.append(engine_options(cfg.engine).decode_workers)
                        or {"counts": {"queries": 1, "ok": 1, "error": 0}})
    exp = tmp_path / "grid.yaml"
    exp.write_text(f"""
out: out
queries: {coco_set['queries']}
images_root: {coco_set['images_root']}
options: {{decode_workers: 3}}
retrievers: {{fake: {{retrieval: {coco_set['run']}}}}}
cells:
  - {{generator: "retrieval:consensus", mode: rag, k: 2, retriever: fake}}
""")
    for extra, want in (([], 3), (["--decode-workers", "1"], 1), (["--option", "decode_workers=0"], 0)):
        seen.clear()
        result = CliRunner().invoke(cli, ["run", str(exp), "--no-progress", *extra])
        assert result.exit_code == 0, result.output
        assert seen == [want]
    result = CliRunner().invoke(cli, ["run", str(exp), "--decode-workers", "-1"])
    assert result.exit_code == 2 and "decode workers must be >= 0" in result.output
