"""retrieval:top1 on real COCO photos, the generate-images CLI, resume, and bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from unirag.cli.generate_images_cmd import generate_images
from unirag.errors import ConfigError, InputError
from unirag.generators.images.base import ImageRequest
from unirag.generators.registry import IMAGE, load_generator

from .helpers import read_pixels


def _cli(*args: str):
    """Invoke the click command in-process; UniragErrors surface as ``result.exception``."""
    return CliRunner().invoke(generate_images, list(args), catch_exceptions=True)


def _outputs(out) -> list[dict]:
    return [json.loads(x) for x in (out / "outputs.jsonl").read_text().splitlines()]


def test_top1_cli_copies_the_retrieved_image_pixel_exactly(t2i_data, tmp_path):
    out = tmp_path / "top1"
    result = _cli("--queries", str(t2i_data.queries), "--pool-images-root", str(t2i_data.root),
                     "--generator", "retrieval:top1", "--mode", "rag", "--k", "1", "--retrieval", str(t2i_data.run),
                     "--out", str(out), "--no-progress")
    assert result.exit_code == 0, result.output
    n = len(t2i_data.records)
    assert f"{n}/{n} images ok" in result.output
    recs = _outputs(out)
    assert [r["qid"] for r in recs] == [f"coco:{r['image_id']}" for r in t2i_data.records]
    for i, rec in enumerate(recs):
        nxt = t2i_data.records[(i + 1) % n]  # the fixture's run retrieves the next query's image
        assert rec["status"] == "ok"
        assert rec["examples"][0]["image_did"] == f"img:{nxt['image_id']}"
        assert rec["meta"]["source"] == f"img:{nxt['image_id']}"
        assert rec["cost_usd"] == 0.0  # the retrieval baseline is free
        saved = read_pixels(out / rec["image"])
        original = read_pixels(t2i_data.root / nxt["image"])
        assert saved.shape == (nxt["height"], nxt["width"], 3)
        assert np.array_equal(saved, original)
        assert (out / rec["image"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        sidecar = json.loads((out / rec["image"]).with_suffix(".prompt.json").read_text())
        assert sidecar["examples"][0]["caption"] == nxt["captions"][1]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["identity"]["examples"] == {"mode": "rag", "k": 1, "retrieval": str(t2i_data.run)}
    assert manifest["counts"] == {"queries": n, "ok": n, "error": 0, "missing": 0}


def test_rerun_skips_finished_queries_and_limit_extends(t2i_data, tmp_path):
    out = tmp_path / "resume"
    base = ["--queries", str(t2i_data.queries), "--pool-images-root", str(t2i_data.root), "--generator",
            "retrieval:top1", "--mode", "rag", "--retrieval", str(t2i_data.run), "--out", str(out), "--no-progress"]
    first = _cli(*base, "--limit", "2")
    assert first.exit_code == 0, first.output
    assert len(_outputs(out)) == 2
    mtime = (out / _outputs(out)[0]["image"]).stat().st_mtime_ns
    second = _cli(*base)
    assert second.exit_code == 0, second.output
    assert "2 already done" in second.output
    recs = _outputs(out)
    assert len(recs) == len(t2i_data.records) == len({r["qid"] for r in recs})  # no duplicates
    assert (out / recs[0]["image"]).stat().st_mtime_ns == mtime  # not regenerated
    third = _cli(*base)
    assert f"{len(recs)} already done" in third.output and len(_outputs(out)) == len(recs)


def test_resume_with_other_settings_is_refused(t2i_data, tmp_path):
    out = tmp_path / "mixed"
    base = ["--queries", str(t2i_data.queries), "--pool-images-root", str(t2i_data.root), "--generator",
            "retrieval:top1", "--mode", "rag", "--retrieval", str(t2i_data.run), "--out", str(out), "--no-progress"]
    assert _cli(*base, "--limit", "1").exit_code == 0
    result = _cli(*base, "--set", "image_seed=7")
    assert isinstance(result.exception, ConfigError) and "different configuration" in str(result.exception)


def test_top1_random_mode_uses_other_queries_gold_images(t2i_data, tmp_path):
    out = tmp_path / "random"
    result = _cli("--queries", str(t2i_data.queries), "--pool-images-root", str(t2i_data.root), "--generator",
                     "retrieval:top1", "--mode", "random", "--k", "2", "--pool", str(t2i_data.pool),
                     "--out", str(out), "--no-progress")
    assert result.exit_code == 0, result.output
    for rec in _outputs(out):
        own = "img:" + rec["qid"].split(":")[1]
        assert len(rec["examples"]) == 2 and own not in {e["image_did"] for e in rec["examples"]}
        assert rec["meta"]["source"] == rec["examples"][0]["image_did"]


def test_top1_needs_examples_and_missing_image_fails_only_that_query(t2i_data, tmp_path):
    with pytest.raises(ConfigError, match="at least 1 example"):
        load_generator("retrieval:top1", IMAGE).check_k(0)
    with pytest.raises(ConfigError, match="unknown retrieval image baseline"):
        load_generator("retrieval:consensus", IMAGE)
    # A run whose pairs point at a missing file: that query is an error record naming the file.
    from unirag.retrieval.run_io import read_retrieval_run, write_retrieval_run

    run = read_retrieval_run(t2i_data.run)
    first = next(iter(run.values()))
    first.pairs[0].img_path = "images/does-not-exist.jpg"
    bad_run = tmp_path / "bad_run.jsonl"
    write_retrieval_run(bad_run, run.values())
    out = tmp_path / "bad"
    result = _cli("--queries", str(t2i_data.queries), "--pool-images-root", str(t2i_data.root), "--generator",
                     "retrieval:top1", "--mode", "rag", "--retrieval", str(bad_run), "--out", str(out), "--no-progress")
    assert result.exit_code == 0, result.output
    recs = {r["qid"]: r for r in _outputs(out)}
    assert recs[first.qid]["status"] == "error" and "does-not-exist.jpg" in recs[first.qid]["error"]
    assert sum(r["status"] == "ok" for r in recs.values()) == len(recs) - 1
    assert "1 failed" in result.output


def test_cli_errors_are_one_line(t2i_data, tmp_path, capsys):
    from unirag.cli.main import main

    args = ["generate-images", "--queries", str(t2i_data.queries), "--out", str(tmp_path / "x")]
    with pytest.raises(SystemExit) as e:
        main([*args, "--generator", "nonsense:model"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown image generator spec 'nonsense:model'") and err.count("\n") == 1
    with pytest.raises(SystemExit) as e:
        main([*args, "--generator", "retrieval:top1", "--mode", "zero-shot"])
    assert e.value.code == 2 and "needs at least 1 example" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main([*args, "--generator", "retrieval:top1", "--mode", "rag"])
    assert e.value.code == 2 and "--retrieval" in capsys.readouterr().err


def test_text_queries_required(t2i_data, tmp_path):
    from unirag.data.mbeir import read_queries
    from unirag.pipelines.image_gen import ImageConfig, run_images

    q = read_queries(t2i_data.queries)[:1]
    q[0].txt = None
    with pytest.raises(InputError, match="query_txt"):
        run_images(ImageConfig(queries=q, generator="retrieval:top1", out=tmp_path / "r", mode="rag", k=1,
                               retrieval=t2i_data.run, pool_images_root=t2i_data.root, progress=False))


def test_top1_generate_keeps_original_pixels_for_grayscale_photo(coco_mini):
    """Some COCO photos are single-channel JPEGs: the copy is their RGB rendering, pixel for pixel."""
    from PIL import Image

    from unirag.retrieval.results import Pair

    def mode(p):
        with Image.open(p) as im:
            return im.mode

    gray = next(p for p in sorted((coco_mini / "images").glob("*.jpg")) if mode(p) == "L")
    gen = load_generator("retrieval:top1", IMAGE)
    out = gen.generate(ImageRequest(qid="q", caption="c", examples=[Pair.of(gray, "x", "g")]))
    with Image.open(gray) as im:
        expected = np.asarray(im.convert("RGB"))
    assert np.array_equal(np.asarray(out.image), expected)


def test_killed_api_run_resumes_without_loss_or_duplicates(t2i_data, tmp_path):
    """SIGKILL a real `unirag generate-images` process mid-run, rerun it: every query once, all images valid."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from PIL import Image

    from fake_openai_server import FakeServer

    from .helpers import openai_image_reply, solid_png

    out = tmp_path / "killed"
    png = solid_png((1, 2, 3))
    with FakeServer(responder=lambda req: openai_image_reply(png), latency=0.4) as srv:
        cmd = [sys.executable, "-m", "unirag", "generate-images", "--queries", str(t2i_data.queries),
               "--generator", "openai-image:gpt-image-1", "--base-url", srv.url, "--out", str(out),
               "--concurrency", "2", "--no-progress"]
        env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        outputs = out / "outputs.jsonl"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if outputs.exists() and len(outputs.read_text().splitlines()) >= 2:
                break
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGKILL)
        proc.communicate()  # reaped, and its pipes closed
        partial = {json.loads(x)["qid"] for x in outputs.read_text().splitlines() if x.strip()}
        assert 2 <= len(partial) < len(t2i_data.records)
        sent_before = len(srv.requests)
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert f"{len(partial)} already done" in done.stdout
        # (a request the kill cut after its headers arrives with no body, possibly after sent_before)
        resent = [r.json["prompt"] for r in srv.requests[sent_before:] if r.json is not None]
    recs = [json.loads(x) for x in outputs.read_text().splitlines()]
    assert len(recs) == len(t2i_data.records) == len({r["qid"] for r in recs})
    assert all(r["status"] == "ok" for r in recs)
    captions = {f"coco:{r['image_id']}": r["captions"][0] for r in t2i_data.records}
    assert not {captions[q] for q in partial} & set(resent)  # finished queries were not sent again
    for r in recs:
        with Image.open(out / r["image"]) as im:
            assert im.size == (16, 12) and im.getpixel((0, 0)) == (1, 2, 3)


def test_top_candidate_baseline_draws_the_top_hits_complement_not_the_first_kept_pair(t2i_data, tmp_path):
    """``image_top1 = top-candidate`` (the official top-1 image baseline, castorini/UniRAG
    src/unirag/eval_image_generation.py@e9a4e00:108-140): the top retrieved candidate is a caption
    whose pair was dropped, so its image is its source item's in the pool; ``first-pair`` (default)
    draws the first pair the query kept instead."""
    from unirag.data.mbeir import read_queries
    from unirag.pipelines.image_gen import ImageConfig, run_images
    from unirag.profiles import resolve
    from unirag.retrieval.results import Hit, Hits, Pair
    from unirag.retrieval.run_io import write_retrieval_run

    query = read_queries(t2i_data.queries)[0]
    a, b = t2i_data.records[1], t2i_data.records[2]
    run = tmp_path / "run.jsonl"
    write_retrieval_run(run, [Hits(
        qid=query.qid, hits=[Hit(did=f"txt:{a['image_id']}", score=0.9, modality="text"),
                             Hit(did=f"img:{b['image_id']}", score=0.8, modality="image")],
        pairs=[Pair(image_did=f"img:{b['image_id']}", text_did=f"txt:{b['image_id']}", img_path=b["image"],
                    txt=b["captions"][1], score=0.8, via="pairing")])])
    drawn = {}
    for rule in ("first-pair", "top-candidate"):
        out = tmp_path / rule
        counts = run_images(ImageConfig(queries=[query], generator="retrieval:top1", out=out, mode="rag", k=1,
                                        retrieval=run, pool=t2i_data.pool, pool_images_root=t2i_data.root,
                                        progress=False, profile=resolve("default", image_top1=rule)))
        assert counts["ok"] == 1, counts
        [rec] = _outputs(out)
        drawn[rule] = rec["examples"][0]["image_did"]
        assert np.array_equal(read_pixels(out / rec["image"]),
                              read_pixels(t2i_data.root / (a if rule == "top-candidate" else b)["image"]))
    assert drawn == {"first-pair": f"img:{b['image_id']}", "top-candidate": f"img:{a['image_id']}"}


def test_grid_image_cell_options_are_the_runs_picture_settings(t2i_data, tmp_path):
    """A grid's picture options (width, height, steps) and run options reach the image run as its config
    fields; the picture's seed is the cell's ``image_seed`` setting."""
    from unirag.pipelines.experiment import run_experiment

    grid = tmp_path / "grid.yaml"
    grid.write_text(f"""
task: image
out: {tmp_path / 'out'}
queries: {t2i_data.queries}
pool_images_root: {t2i_data.root}
retrievers: {{r: {{retrieval: {t2i_data.run}}}}}
settings: {{image_seed: 7}}
options: {{width: 48, height: 40, steps: 3, save_prompts: 1, limit: 2}}
cells:
  - {{generator: "retrieval:top1", mode: rag, k: 1, retriever: r}}
""")
    [result] = run_experiment(grid, progress=False, echo=lambda s: None)
    assert result["status"] == "ok" and result["counts"]["ok"] == 2
    cell = tmp_path / "out" / "image" / "retrieval-top1" / "rag-k1-r"
    identity = json.loads((cell / "manifest.json").read_text())["identity"]
    assert (identity["width"], identity["height"], identity["steps"], identity["seed"]) == (48, 40, 3, 7)
    assert {p.name[:4] for p in (cell / "prompts").iterdir()} == {"000_"}  # save_prompts: 1
