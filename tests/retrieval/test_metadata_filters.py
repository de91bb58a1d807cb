"""Metadata filters on real product data (the Myntra fixture) as a new user runs them: captions carry
their product's fields after ``unirag import jsonl``, ``Pool.from_pairs`` takes per-pair metadata, a
misspelt field is an error naming the known fields, and a filter matching fewer than k candidates says
how many it matched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from unirag import Index, Pool, Retriever
from unirag.cli.main import main
from unirag.errors import ConfigError

N_PRODUCTS = 24


@pytest.fixture(scope="module")
def products(myntra: Path) -> list[dict]:
    rows = [json.loads(line) for line in (myntra / "products.jsonl").read_text().splitlines()]
    return rows[:N_PRODUCTS]


@pytest.fixture(scope="module")
def imported(myntra: Path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("myntra_import")
    main(["import", "jsonl", "--input", str(myntra / "products.jsonl"), "--images", str(myntra), "--out",
          str(out), "--caption-field", "productDisplayName", "--id-field", "id", "--limit", str(N_PRODUCTS)])
    return out


@pytest.fixture(scope="module")
def product_index(imported: Path, myntra: Path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("myntra_index") / "index"
    Index.build(Pool.read(imported / "pool.jsonl", myntra), out, encoder=None, progress=False)
    return out


def test_imported_captions_inherit_their_products_fields(imported: Path, products: list[dict]) -> None:
    by_id = {str(p["id"]): p for p in products}
    pool = [json.loads(line) for line in (imported / "pool.jsonl").read_text().splitlines()]
    captions = [c for c in pool if c["modality"] == "text"]
    assert len(captions) == N_PRODUCTS
    for c in captions:
        src = json.loads(c["src_content"])
        product = by_id[src["source_id"]]
        assert src["gender"] == product["gender"] and src["articleType"] == product["articleType"]


def test_cli_text_filter_finds_captions_and_a_misspelt_field_is_one_line(product_index, imported, myntra,
                                                                          products, tmp_path, capsys) -> None:
    run = tmp_path / "men.jsonl"
    main(["retrieve", "--index", str(product_index), "--queries", str(imported / "queries_task3_image2text.jsonl"),
          "--images-root", str(myntra), "--modality", "text", "--k", "3", "--set", "filter=gender=Men",
          "--out", str(run)])
    out = capsys.readouterr()
    assert "fewer than" not in out.out + out.err
    men = {str(p["id"]) for p in products if p["gender"] == "Men"}
    lines = [json.loads(line) for line in run.read_text().splitlines()]
    assert lines and all(len(r["pairs"]) == 3 for r in lines)
    assert all(p["text_did"].split(":")[-1].split(".")[0] in men for r in lines for p in r["pairs"])

    women = sum(p["gender"] == "Women" for p in products)
    with pytest.warns(UserWarning) as warned:  # the CLI prints it as one "warning: ..." line
        main(["retrieve", "--index", str(product_index), "--queries",
              str(imported / "queries_task3_image2text.jsonl"), "--images-root", str(myntra), "--modality", "text",
              "--k", "10", "--set", "filter=gender=Women", "--out", str(tmp_path / "women.jsonl")])
    assert [str(w.message) for w in warned] == [f"the filter gender=Women matches {women} text candidate(s), fewer "
                                                f"than k=10: each query gets at most {women} example(s)"]
    capsys.readouterr()

    with pytest.raises(SystemExit) as e:
        main(["retrieve", "--index", str(product_index), "--queries",
              str(imported / "queries_task3_image2text.jsonl"), "--images-root", str(myntra), "--modality", "text",
              "--set", "filter=gendr=Men", "--out", str(tmp_path / "typo.jsonl")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "'gendr'" in err and "gender" in err and "articleType" in err


def test_pool_from_pairs_metadata_filters_and_says_how_many_matched(products, myntra: Path, tmp_path) -> None:
    pairs = [(myntra / p["image"], p["productDisplayName"], {"gender": p["gender"], "colour": p["baseColour"]})
             for p in products]
    pool = Pool.from_pairs(pairs)
    assert all(json.loads(c.src_content)["gender"] for c in pool)
    index = Index.build(pool, tmp_path / "idx", encoder=None, progress=False)
    retriever = Retriever(index)
    women = {p["productDisplayName"] for p in products if p["gender"] == "Women"}
    assert 0 < len(women) < 10
    with pytest.warns(UserWarning, match=f"matches {len(women)} text candidate"):
        hits = retriever.search(text="a shirt", k=10, modality="text", where={"gender": "Women"})
    assert {h.pair.txt for h in hits} == women
    with pytest.raises(ConfigError, match=r"'gendr'.*known fields: .*colour.*gender"):
        retriever.search(text="a shirt", k=3, modality="text", where={"gendr": "Women"})
