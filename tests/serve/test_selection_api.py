"""Example selection through the API (/v1/search, /v1/caption) on the bundled real sample: an uploaded
pool photo has no path to compare, so only the near-duplicate guard keeps it out of its own examples."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from unirag.serve.app import create_app
from unirag.serve.settings import ServeSettings

from .conftest import PHOTOS


@pytest.fixture(scope="module")
def client(engine):
    with TestClient(create_app(ServeSettings(index=engine.settings.index), engine)) as c:
        yield c


def _upload(i: int) -> dict:
    return {"image": ("photo.jpg", PHOTOS[i].read_bytes(), "image/jpeg")}


def _own_image_did(i: int) -> str:
    return f"coco:img:{int(PHOTOS[i].stem)}"


def test_caption_reports_then_excludes_the_uploaded_photo_from_its_own_examples(client) -> None:
    report = client.post("/v1/caption", files=_upload(3), data={"mode": "rag", "k": "5"})
    assert report.status_code == 200, report.text
    body = report.json()
    assert body["selection"]["near_duplicates"] == "report"
    own = [e for e in body["examples"] if e["did"] == _own_image_did(3)]
    assert own and all(e["near_duplicate"].startswith("image-hash:") for e in own)

    exclude = client.post("/v1/caption", files=_upload(3),
                          data={"mode": "rag", "k": "5", "near_duplicates": "exclude", "one_per_image": "true"})
    assert exclude.status_code == 200, exclude.text
    body = exclude.json()
    dids = [e["did"] for e in body["examples"]]
    assert len(dids) == 5 == len(set(dids)) and _own_image_did(3) not in dids
    assert not any("near_duplicate" in e for e in body["examples"])
    assert body["selection"]["one_per_image"] is True and body["selection"]["near_duplicates"] == "exclude"


def test_search_takes_filters_and_diversity(client) -> None:
    r = client.post("/v1/search", data={"text": "a bus on a street", "k": "8", "filter": ["modality=image"],
                                        "diversity": "mmr"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [h["modality"] for h in body["hits"]] == ["image"] * 8
    assert body["query"]["selection"]["where"] == {"modality": ["image"]}
    assert body["query"]["selection"]["diversity"] == "mmr"
    none = client.post("/v1/search", data={"text": "a bus on a street", "k": "3", "filter": ["dataset=webqa"]})
    assert none.status_code == 200 and none.json()["hits"] == []


@pytest.mark.parametrize("data", [{"diversity": "random"}, {"near_duplicates": "drop"}, {"filter": ["no-equals"]},
                                  {"mmr_lambda": "2"}])
def test_bad_selection_fields_are_400(client, data) -> None:
    r = client.post("/v1/search", data={"text": "a bus", "k": "2", **data})
    assert r.status_code == 400 and "error" in r.json()


@pytest.mark.parametrize("fields, message", [
    ({"mmr_lambda": "half"}, "mmr_lambda"), ({"one_per_image": "maybe"}, "one_per_image"),
    ({"filter": [5]}, "filter: must be a list of strings"), ({"filter": "no-equals"}, "no-equals"),
])
def test_bad_selection_fields_in_json_are_400_naming_the_field(client, fields, message) -> None:
    """JSON selection fields are read as ``--set`` reads them (strings parsed by the setting's type)."""
    r = client.post("/v1/search", json={"text": "a bus", "k": 2, **fields})
    assert r.status_code == 400 and message in r.json()["error"], r.text


def test_selection_fields_in_json_take_strings_and_values_alike(client) -> None:
    for fields in ({"one_per_image": "yes", "mmr_lambda": "0.5"}, {"one_per_image": True, "mmr_lambda": 0.5}):
        r = client.post("/v1/search", json={"text": "a bus", "k": 2, "diversity": "mmr", **fields})
        assert r.status_code == 200, r.text
        assert r.json()["query"]["selection"]["one_per_image"] is True
        assert r.json()["query"]["selection"]["mmr_lambda"] == 0.5
