"""``Retriever.search(..., instruction=)`` on a tiny UniIR CLIP-SF checkpoint gives what
``unirag retrieve --instructions`` gives for the same M-BEIR records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import run_cli

import unirag
from tiny_models import tiny_uniir_clip_sf
from unirag.data.mbeir import read_queries, write_queries
from unirag.encoders.instructions import QueryInstructions

TSV = Path(__file__).resolve().parents[1] / "fixtures" / "mbeir" / "query_instructions.tsv"


@pytest.fixture(scope="module")
def uniir(demo, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("uniir")
    spec = f"uniir:clip_sf:{tiny_uniir_clip_sf()}"
    unirag.Index.build(unirag.Pool.read(demo["pool"], demo["images"]), tmp / "index", encoder=spec, device="cpu",
                       dtype="float32")
    return {"dir": tmp, "spec": spec, "index": tmp / "index"}


@pytest.mark.parametrize("task", ["i2t", "t2i"])
def test_instructed_search_matches_retrieve_with_instructions(demo, uniir, task, tmp_path):
    queries = read_queries(demo[task])[:4]
    write_queries(tmp_path / "q.jsonl", queries)
    run_cli("retrieve", "--index", uniir["index"], "--queries", tmp_path / "q.jsonl", "--images-root", demo["images"],
            "--k", 5, "--instructions", TSV, "--device", "cpu", "--out", tmp_path / "run.jsonl")
    cli = {r["qid"]: r for r in map(json.loads, (tmp_path / "run.jsonl").read_text().splitlines())}
    table = QueryInstructions.read(TSV)
    encoder = unirag.load_encoder(uniir["spec"], device="cpu", dtype="float32", instructions=str(TSV))
    retriever = unirag.Retriever(uniir["index"], encoder)
    for q in queries:
        prompt = table.instruction_for(q)
        assert prompt  # the fixture table has COCO's prompts for both tasks
        image = demo["images"] / q.img_path if q.img_path else None
        hits = retriever.search(image=image, text=q.txt, k=5, instruction=prompt)
        assert [h.did for h in hits] == [c["did"] for c in cli[q.qid]["candidates"]]
        assert [h.score for h in hits] == pytest.approx([c["score"] for c in cli[q.qid]["candidates"]], abs=1e-6)
        plain = retriever.search(image=image, text=q.txt, k=5)
        assert [h.score for h in plain] != pytest.approx([h.score for h in hits], abs=1e-6)  # the prompt matters


def test_instruction_with_an_encoder_that_takes_none_is_refused(retriever, demo):
    with pytest.raises(unirag.ConfigError, match="UniIR"):
        retriever.search(text="a dog", instruction="Retrieve an image.")
