"""CIRR under the official X^R protocol: the reference stays in the gallery, R_subset from a separate pass.

Hand computation for the subset pass (vectors and scripted replies in xr_fixtures.py; the full run is
test_pipeline_agents.py's: final order c5 c4 c1 c2 c3 with k' = 3, so c2 is never verified there):

  img_set minus the reference: c1, c2, c5; k' = min(3, 4 - 1) = 3
  S^t: c1 1.40, c2 1.00, c5 0.60     S^v: c1 1.40, c2 0.80, c5 1.80
  RRF: c1 1/61 + 1/62 = .032522, c5 1/63 + 1/61 = .032266, c2 1/62 + 1/63 = .031002 -> coarse c1 c5 c2
  S_q^t: cap1 1, cap5 2, cap2 2      S_q^v: c1 0, c5 2, c2 2
  norm S^t {1.4, .6, 1.0} -> c1 1, c5 0, c2 .5; norm S^v {1.4, 1.8, .8} -> c1 .6, c5 1, c2 0
  lambda .5: c1 1 * .8 = .8, c5 4 * .5 = 2.0, c2 4 * .25 = 1.0 -> c5 c2 c1
  cut (unirag): the full final order restricted to the set -> c5 c1 c2
"""

from __future__ import annotations

import json

import pytest
from xr_fixtures import CROSS_IMAGE, CROSS_TEXT, TEXT_TABLE, TableEncoder, make_world, responder

from fake_openai_server import FakeServer
from unirag.cir import api
from unirag.cir.config import RoleConfig, XRConfig, XRSettings
from unirag.cir.xr import XR
from unirag.profiles import resolve


def _config(url: str) -> XRConfig:
    roles = {r: RoleConfig(model="openai:fake-vlm", options={"base_url": url})
             for r in ("caption", "text_imagination", "vision_imagination", "question", "text_question",
                       "vision_question")}
    return XRConfig(roles=roles, settings=XRSettings(k_prime=3, k=5, lam=0.5))


def _cirr_run(tmp_path, url, subset: str):
    ds = make_world(tmp_path / "images")
    ds.kind, ds.exclude_reference = "cirr", True
    ds.queries[0].subset = ["query:q1", "c1", "c2", "c5"]
    out = tmp_path / subset  # every other setting is the default profile's: the hand computation's
    run = XR(_config(url), cache_dir=tmp_path / "cache", profile=resolve("default", xr_cirr_subset=subset),
                 encoder=TableEncoder(CROSS_TEXT, CROSS_IMAGE, "cross"), text_encoder=TableEncoder(TEXT_TABLE),
                 progress=False, echo=lambda s: None)
    metrics = run.run(ds, out)
    return metrics, json.loads((out / "rankings.jsonl").read_text().splitlines()[0])


def test_official_r_subset_comes_from_a_separate_pass_over_the_image_set(tmp_path):
    """01yzzyu/xr.github.io XR/xr.py:50-53 (``--subset``: ``top_k = len(img_set) - 1``) and :588-610 (the
    stage-1 list cut to the img_set members, the reference skipped, re-sorted by similarity; stage 2 then
    re-ranks that list): the official R_subset is a run of its own (``--subset``, :1571), not the full
    ranking cut to the set."""
    make_world(tmp_path / "images")
    with FakeServer(responder=responder(tmp_path / "images")) as srv:
        m_rerank, row = _cirr_run(tmp_path, srv.url, resolve("official")["xr_cirr_subset"])  # the official value
        assert row["ranked"] == ["c5", "c4", "c1", "c2", "c3"]  # the full ranking is the same run's
        assert row["subset_ranked"]["xr"] == ["c5", "c2", "c1"]
        assert row["subset_ranked"]["xr_coarse"] == ["c1", "c5", "c2"]
        assert m_rerank["xr"]["R_subset@1"] == 100
        assert any("separate pass" in n for n in m_rerank["notes"])
        _, row = _cirr_run(tmp_path, srv.url, "cut")
        assert row["subset_ranked"]["xr"] == ["c5", "c1", "c2"]


class _Stop(Exception):
    pass


@pytest.fixture()
def loader_args(monkeypatch):
    calls = []

    def fake(*args, **kwargs):
        calls.append(args)
        raise _Stop

    monkeypatch.setattr(api, "load_dataset", fake)
    return calls


def test_official_keeps_the_cirr_reference_in_the_gallery(tmp_path, loader_args):
    """XR/xr.py:612-623 (``_eval_and_log``) finds the target's rank in the full ``sorted_names`` list, which
    holds every gallery image, the reference too (XR/utils/data.py:77-95 keeps it), and :1297-1300 submits
    the first 50 of that list: nothing removes the reference. ``exclude_reference`` given by hand still wins."""
    path = tmp_path / "cap.rc2.val.json"
    path.write_text("[]")
    for profile, given in (("official", None), ("default", None), ("official", True)):
        with pytest.raises(_Stop):
            api.run_cir("cirr", path, images_root=tmp_path, out_dir=tmp_path / "out", profile=profile,
                        exclude_reference=given, progress=False, echo=lambda s: None)
    assert [args[5] for args in loader_args] == [False, None, True]
