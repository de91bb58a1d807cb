"""--device/--dtype and --instructions on the commands that run an encoder (tiny checkpoints, CPU)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from index.helpers import write_coco_mbeir
from tiny_models import tiny_clip_dir, tiny_uniir_clip_sf
from unirag.cli.main import main
from unirag.retrieval.run_io import read_retrieval_run

FIXTURE_TSV = Path(__file__).resolve().parents[1] / "fixtures" / "mbeir" / "query_instructions.tsv"


@pytest.fixture(scope="module")
def mbeir(coco_mini, tmp_path_factory) -> dict[str, Path]:
    return write_coco_mbeir(coco_mini, tmp_path_factory.mktemp("mbeir"), n_images=8)


def test_index_built_in_float32_retrieved_in_bfloat16(mbeir, coco_mini, tmp_path, capsys):
    idx = tmp_path / "idx"
    main(["index", "build", "--pool", str(mbeir["pool"]), "--images-root", str(coco_mini), "--out", str(idx),
          "--encoder", str(tiny_clip_dir()), "--device", "cpu", "--dtype", "float32"])
    manifest = json.loads((idx / "manifest.json").read_text())
    assert manifest["encoder"]["config"]["dtype"] == "float32" and manifest["encoder"]["config"]["device"] == "cpu"
    out = tmp_path / "run.jsonl"
    main(["retrieve", "--index", str(idx), "--queries", str(mbeir["t2i"]), "--images-root", str(coco_mini),
          "--k", "3", "--out", str(out), "--device", "cpu", "--dtype", "bfloat16"])
    assert len(read_retrieval_run(out)) == 8


def test_bad_device_is_refused_before_work(mbeir, coco_mini, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["index", "build", "--pool", str(mbeir["pool"]), "--images-root", str(coco_mini),
              "--out", str(tmp_path / "idx"), "--encoder", str(tiny_clip_dir()), "--device", "quantum"])
    assert e.value.code == 2 and "unknown torch device" in capsys.readouterr().err
    assert not (tmp_path / "idx").exists()


def test_uniir_instructions_found_in_mbeir_layout_or_switched_off(mbeir, coco_mini, tmp_path):
    """M-BEIR keeps queries in <root>/query/<split>/ and the instructions in <root>/instructions/."""
    root = tmp_path / "M-BEIR"
    (root / "query" / "test").mkdir(parents=True)
    (root / "instructions").mkdir()
    shutil.copy(FIXTURE_TSV, root / "instructions" / "query_instructions.tsv")
    queries = root / "query" / "test" / "queries_i2t.jsonl"
    lines = [json.loads(x) for x in mbeir["i2t"].read_text().splitlines()]
    queries.write_text("".join(json.dumps({**q, "qid": "9:" + str(i + 1)}) + "\n" for i, q in enumerate(lines)))
    spec = f"uniir:clip_sf:{tiny_uniir_clip_sf()}"
    idx = tmp_path / "idx"
    main(["index", "build", "--pool", str(mbeir["pool"]), "--images-root", str(coco_mini), "--out", str(idx),
          "--encoder", spec, "--device", "cpu"])
    runs = {}
    for name, extra in (("auto", []), ("given", ["--instructions", str(FIXTURE_TSV)]), ("off", ["--no-instructions"])):
        out = tmp_path / f"{name}.jsonl"
        main(["retrieve", "--index", str(idx), "--queries", str(queries), "--images-root", str(coco_mini), "--k", "5",
              "--modality", "text", "--out", str(out), "--device", "cpu", *extra])
        runs[name] = {q: [(c.did, round(c.score, 5)) for c in r] for q, r in read_retrieval_run(out).items()}
    assert runs["auto"] == runs["given"]  # the file beside the M-BEIR root was found and used
    assert runs["auto"] != runs["off"]  # instructed image queries are fused image+instruction queries
