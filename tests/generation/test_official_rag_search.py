"""RAG captioning from an index under ``official`` searches captions; a run short of examples says so."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner


@pytest.fixture(scope="module")
def coco_index(coco_set, tmp_path_factory):
    from unirag.cli.main import cli

    index = tmp_path_factory.mktemp("rag_index") / "index"  # the offline encoder: a real joint space
    built = CliRunner().invoke(cli, ["index", "build", "--pool", str(coco_set["pool"]), "--images-root",
                                     str(coco_set["images_root"]), "--out", str(index)])
    assert built.exit_code == 0, built.output
    return index


def _caption(coco_set, index, out, profile, monkeypatch):
    from unirag.pipelines.caption import CaptionConfig, run_captioning
    from unirag.retrieval.retriever import Retriever

    searched: list[str] = []
    original = Retriever.retrieve

    def spy(self, queries, k, modality="any", *args, **kwargs):
        searched.append(str(modality))
        return original(self, queries, k, modality, *args, **kwargs)

    monkeypatch.setattr(Retriever, "retrieve", spy)
    summary = run_captioning(CaptionConfig(queries=coco_set["queries"], generator="retrieval:top1", out=out,
                                           mode="rag", k=2, images_root=coco_set["images_root"], index=index,
                                           pool=coco_set["pool"], limit=4, profile=profile, progress=False))
    records = [json.loads(x) for x in (out / "outputs.jsonl").read_text().splitlines()]
    return searched, records, summary


def test_official_caption_rag_searches_captions_as_uniirs_task3_candidates(coco_set, coco_index, tmp_path,
                                                                          monkeypatch):
    """UniRAG's captioning reads UniIR's image->text (task 3) retrieval results, i.e. caption candidates
    (castorini/UniRAG scripts/caption_generation.sh@e9a4e00:14 ``mbeir_mscoco_task3_union_pool_test_k10_
    retrieved.jsonl``, :64 for Fashion200k), which ``get_candidates`` (src/unirag/incontext_example_provider.py
    @07190083:9-44) completes with their images. Searching every modality instead starts the per-hit pairs
    from the query photo and its look-alikes, which the official filters then drop (issue 27, point 0)."""
    from unirag.data.mbeir import load_pool

    searched, records, summary = _caption(coco_set, coco_index, tmp_path / "official", "official", monkeypatch)
    assert searched and set(searched) == {"text"}
    pool = load_pool(coco_set["pool"])
    for r in records:
        assert r["status"] == "ok" and len(r["examples"]) == 2
        assert all(pool[e["text_did"]].modality.value == "text" for e in r["examples"])  # hits are captions
    manifest = json.loads((tmp_path / "official" / "manifest.json").read_text())
    assert manifest["identity"]["examples"]["modality"] == "text"
    assert manifest["settings"]["profile"]["settings"]["rag_modality"] == "task"
    assert "short" not in summary["counts"]

    searched, _, _ = _caption(coco_set, coco_index, tmp_path / "default", "default", monkeypatch)
    assert set(searched) == {"any"}  # unirag's default: every modality (per-candidate pairs widen the search)


def test_image_generation_searches_images_under_rag_modality_task(coco_set, coco_index):
    """Image generation's examples supply images: UniRAG's image runs read UniIR's text->image (task 0)
    retrieval results (castorini/UniRAG scripts/prepare_dataset.sh@e9a4e00:9, :18, :25
    ``mbeir_{fashion200k,mscoco}_task0_union_pool_test_k*_retrieved.jsonl``, read by
    scripts/image_generation.sh@e9a4e00:15, :45)."""
    from unirag.pipelines.examples import make_selector

    assert make_selector("rag", 1, index=coco_index, profile="official", supplies="image").modality == "image"
    assert make_selector("rag", 1, index=coco_index, profile="official").modality == "text"
    assert make_selector("rag", 1, index=coco_index, profile="default", supplies="image").modality == "any"


def test_a_run_short_of_examples_says_how_many_queries_fell_short(coco_set, tmp_path):
    """No run may end with fewer examples than asked without saying so (issue 27, point 0): the run file
    holds 5 pairs per query, k=6 asks for more; the summary line and the manifest count the queries."""
    from unirag.cli.main import cli

    out = tmp_path / "run"
    result = CliRunner().invoke(cli, ["caption", "--queries", str(coco_set["queries"]), "--images-root",
                                      str(coco_set["images_root"]), "--generator", "retrieval:top1", "--mode", "rag",
                                      "--k", "6", "--retrieval", str(coco_set["run"]), "--out", str(out),
                                      "--limit", "3", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "3/3 captioned, 0 failed" in result.output
    assert "3 quer(ies) with fewer than 6 examples" in result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"]["short"] == 3

    full = tmp_path / "full"
    result = CliRunner().invoke(cli, ["caption", "--queries", str(coco_set["queries"]), "--images-root",
                                      str(coco_set["images_root"]), "--generator", "retrieval:top1", "--mode", "rag",
                                      "--k", "5", "--retrieval", str(coco_set["run"]), "--out", str(full),
                                      "--limit", "3", "--no-progress"])
    assert result.exit_code == 0 and "fewer than" not in result.output
    assert "short" not in json.loads((full / "manifest.json").read_text())["counts"]
