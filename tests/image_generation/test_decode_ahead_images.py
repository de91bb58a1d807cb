"""Image runs with a local model: the next queries' example images decoded ahead in decode workers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from unirag.data.mbeir import read_queries
from unirag.generators.registry import IMAGE, load_generator
from unirag.pipelines.image_gen import ImageConfig, run_images
from unirag.runs.engine import EngineOptions

from .test_lavit_emu2_python import make_emu2_dir

SMALL = dict(width=32, height=32, steps=2, guidance=4.0, image_seed=1234)


@pytest.fixture(scope="module")
def emu2(tmp_path_factory):
    gen = load_generator(f"emu2-gen:{make_emu2_dir(tmp_path_factory.mktemp('emu2') / 'Emu2-Gen')}", IMAGE,
                               device="cpu")
    yield gen
    gen.close()


def _run(gen, t2i_data, out: Path, workers, images_root=None):
    queries = read_queries(t2i_data.queries)
    before = len(gen._pipe.calls)
    counts = run_images(ImageConfig(queries=queries, generator=gen.spec, out=out, mode="rag", k=1,
                                    retrieval=t2i_data.run, pool_images_root=images_root or t2i_data.root,
                                    **SMALL, progress=False, save_prompts=0,
                                    engine=EngineOptions(decode_workers=workers)), gen)
    recs = {r["qid"]: {k: v for k, v in r.items() if k not in ("latency_s", "attempts")}
            for r in map(json.loads, (out / "outputs.jsonl").read_text().splitlines())}
    inputs = [[np.asarray(x) if not isinstance(x, str) else x for x in c["inputs"]]
              for c in gen._pipe.calls[before:]]
    return counts, recs, inputs


def test_decode_workers_decode_the_examples_ahead_and_change_no_picture(emu2, t2i_data, tmp_path, decoded_here):
    """At 2 workers the model's process decodes no example image, and the model gets the same pixels and
    draws the same pictures as with inline decoding (0)."""
    got = {}
    for workers in (0, 2):
        decoded_here.clear()
        counts, recs, inputs = _run(emu2, t2i_data, tmp_path / f"run{workers}", workers)
        assert counts["ok"] == len(recs) == 6 and counts["error"] == 0
        pngs = {q: (tmp_path / f"run{workers}" / r["image"]).read_bytes() for q, r in recs.items()}
        got[workers] = (recs, inputs, pngs, list(decoded_here))
    assert len(got[0][3]) == 6  # inline: each query's example image, decoded here
    assert got[2][3] == []
    assert got[2][0] == got[0][0]
    assert got[2][2] == got[0][2]
    a, b = got[0][1], got[2][1]
    assert len(a) == len(b) == 6
    for call_a, call_b in zip(a, b, strict=True):
        assert len(call_a) == len(call_b)
        for x, y in zip(call_a, call_b, strict=True):
            assert (x == y) if isinstance(x, str) else np.array_equal(x, y)


def test_an_unreadable_example_image_fails_its_query_with_the_inline_message(emu2, t2i_data, tmp_path,
                                                                          decoded_here):
    root = tmp_path / "images"
    for r in t2i_data.records:
        (root / r["image"]).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(t2i_data.root / r["image"], root / r["image"])
    bad = root / t2i_data.records[1]["image"]  # query 0's example
    bad.write_bytes(b"not an image at all")
    errors = {}
    for workers in (0, 2):
        decoded_here.clear()
        counts, recs, _ = _run(emu2, t2i_data, tmp_path / f"run{workers}", workers, images_root=root)
        assert counts["ok"] == 5 and counts["error"] == 1
        failed = [r for r in recs.values() if r["status"] == "error"]
        assert [r["qid"] for r in failed] == [read_queries(t2i_data.queries)[0].qid]
        errors[workers] = failed[0]["error"]
        if workers == 2:  # only the unreadable file is tried here, where the query fails on it
            assert decoded_here == [bad.name]
    assert "cannot decode image" in errors[0] and bad.name in errors[0]
    assert errors[2] == errors[0]


def test_cli_decode_workers_reach_the_run(emu2, t2i_data, tmp_path, decoded_here, capsys):
    """``unirag generate-images --decode-workers 2``: the example images are decoded in the workers;
    a bad value is one line and exit 2."""
    from cli_capture import main_result

    base = ["generate-images", "--queries", str(t2i_data.queries), "--pool-images-root", str(t2i_data.root),
            "--generator", emu2.spec, "--device", "cpu", "--mode", "rag", "--k", "1", "--retrieval",
            str(t2i_data.run), "--width", "32", "--height", "32", "--steps", "2", "--no-progress"]
    code, out, err = main_result([*base, "--out", str(tmp_path / "run"), "--decode-workers", "2"], capsys)
    assert code == 0, err
    assert "6/6 images ok" in out
    assert decoded_here == []
    code, _, err = main_result([*base, "--out", str(tmp_path / "bad"), "--decode-workers", "-1"], capsys)
    assert code == 2 and "decode workers must be >= 0" in err
