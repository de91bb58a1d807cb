"""``unirag report`` on small real runs: tables, plots and the HTML gallery (parsed with html.parser)."""

from __future__ import annotations

import csv
import json
import os
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner
from eval_run_factory import coco_rows, example, write_caption_task, write_image_task, write_run
from PIL import Image

from unirag.cli.main import cli
from unirag.errors import InputError
from unirag.metrics.captions import evaluate_caption_run
from unirag.reports.build import build_report

DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img"
EVIL = '<script>alert("x")</script> & a "quoted" dog'
PAPER = {  # Table 3 numbers for the rows that are not evaluated here (layout only)
    "ret": {"BLEU-1": 88.5, "BLEU-2": 84.2, "BLEU-3": 81.5, "BLEU-4": 79.9, "CIDEr": 215.3, "ROUGE-L": 83.2},
    "zs": {"BLEU-1": 58.0, "BLEU-2": 39.9, "BLEU-3": 27.0, "BLEU-4": 18.0, "CIDEr": 64.3, "ROUGE-L": 42.2},
    "rag5": {"BLEU-1": 75.1, "BLEU-2": 61.7, "BLEU-3": 50.7, "BLEU-4": 42.4, "CIDEr": 128.9, "ROUGE-L": 60.6},
    "rnd1": {"BLEU-1": 62.6, "BLEU-2": 45.7, "BLEU-3": 32.7, "BLEU-4": 23.1, "CIDEr": 79.2, "ROUGE-L": 47.5},
}
LLAVA = "hf:llava-hf/llava-1.5-7b-hf"


class Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.cards: list[dict] = []
        self.tags: list[str] = []
        self.srcs: list[str] = []
        self.hrefs: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append(tag)
        if tag == "article" and "card" in a.get("class", ""):
            self.cards.append({"class": a["class"], "id": a.get("id"), "imgs": 0})
        if tag == "img":
            self.srcs.append(a["src"])
            if self.cards:
                self.cards[-1]["imgs"] += 1
        if tag == "a":
            self.hrefs.append(a["href"])

    def handle_data(self, data):
        self.text.append(data)


def parse(path: Path) -> Page:
    p = Page()
    p.feed(path.read_text(encoding="utf-8"))
    return p


def _manifest(queries, pool, root, **kw):
    return {"queries": str(queries), "pool": str(pool), "images_root": str(root), "seed": 0, **kw}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, coco_mini):
    tmp = tmp_path_factory.mktemp("report")
    rows = coco_rows(coco_mini, 12)
    queries, pool = write_caption_task(tmp, rows[:8])
    # the evaluated run: RAG k=1 with real examples, one failure, one caption that needs escaping
    records = []
    for i, r in enumerate(rows[:8]):
        rec = {"qid": f"9:{r['image_id']}", "caption": f"Caption [2]: {r['captions'][0]}",
               "examples": [example(rows[8 + i % 4])]}
        if i == 2:
            rec["caption"] = EVIL
        if i == 5:
            rec = {"qid": rec["qid"], "status": "error", "error": "HTTP 429 <rate limited>", "caption": None,
                   "examples": rec["examples"]}
        records.append(rec)
    common = dict(task="caption", dataset="coco-mini")
    rag1 = write_run(tmp / "rag-k1", records, _manifest(queries, pool, coco_mini, generator=LLAVA, mode="rag", k=1,
                                                       retriever="CLIP-SF", **common))
    evaluate_caption_run(rag1, queries, pool, meteor=False)
    others = {"ret": ("retrieval:top1", "rag", 1), "zs": (LLAVA, "zero-shot", 0), "rag5": (LLAVA, "rag", 5),
              "rnd1": (LLAVA, "random", 1)}
    dirs = {"rag1": rag1}
    for name, (gen, mode, k) in others.items():
        d = write_run(tmp / name, records[:2], _manifest(queries, pool, coco_mini, generator=gen, mode=mode, k=k,
                                                         retriever="CLIP-SF", **common))
        (d / "metrics.json").write_text(json.dumps({"task": "caption", "metrics": PAPER[name], "n_scored": 2,
                                                    "skipped_metrics": {"SPICE": "SPICE skipped: ..."}}))
        dirs[name] = d
    # an image run with generated PNGs and metrics written by hand
    iq, ipool = write_image_task(tmp, rows[:4])
    img_run = tmp / "img-zs"
    (img_run / "images").mkdir(parents=True)
    img_records = []
    for i, r in enumerate(rows[:4]):
        Image.open(coco_mini / rows[11 - i]["image"]).convert("RGB").resize((64, 64)).save(img_run / "images" / f"{i}.png")
        img_records.append({"qid": f"t:{r['image_id']}", "image": f"images/{i}.png"})
    write_run(img_run, img_records, _manifest(iq, ipool, coco_mini, task="image", dataset="coco-mini",
                                              generator="diffusers:lavit", mode="zero-shot", k=0))
    (img_run / "metrics.json").write_text(json.dumps({"task": "image", "metrics": {"FID": 64.8, "CLIP Score": 26.27,
                                                                                   "IS": 16.38, "IS SD": 1.27}}))
    dirs["img"] = img_run
    return dirs


@pytest.fixture(scope="module")
def report(runs, tmp_path_factory):
    out = tmp_path_factory.mktemp("out") / "report"
    order = ["rag5", "rnd1", "img", "rag1", "zs", "ret"]  # any order in, paper order out
    res = CliRunner().invoke(cli, ["report", *[str(runs[n]) for n in order], "--out", str(out), "--max-cards", "6"])
    assert res.exit_code == 0, res.output
    return out, res.output


def test_caption_table_in_paper_layout(report):
    out, output = report
    md = (out / "tables" / "caption_coco-mini.md").read_text()
    rows = [line for line in md.splitlines() if line.startswith("| ") and "---" not in line][1:]
    labels_k = [(r.split("|")[1].strip(), r.split("|")[2].strip()) for r in rows]
    assert labels_k == [("CLIP-SF (top1)", "1"), ("llava-1.5-7b-hf", "0"), ("CLIP-SF + llava-1.5-7b-hf", "1"),
                        ("", "5"), ("Random + llava-1.5-7b-hf", "1")]
    header = md.splitlines()[2]
    assert "BLEU-4" in header and "CIDEr" in header and "SPICE" not in header and "METEOR" not in header
    assert "Not computed: METEOR, SPICE" in md
    assert "| 215.3 |" in rows[0]
    assert md in output  # printed by the command


def test_csv_values_trace_back_to_metrics_json(report, runs):
    out, _ = report
    with (out / "tables" / "caption_coco-mini.csv").open() as f:
        table = list(csv.DictReader(f))
    by_run = {r["run"]: r for r in table}
    evaluated = json.loads((runs["rag1"] / "metrics.json").read_text())
    assert float(by_run["rag-k1"]["CIDEr"]) == pytest.approx(evaluated["metrics"]["CIDEr"], abs=1e-4)
    assert by_run["rag-k1"]["n_failed"] == "1" and by_run["rag5"]["k"] == "5" and by_run["ret"]["mode"] == "retrieval"


def test_image_table_shows_is_with_sd(report):
    out, _ = report
    md = (out / "tables" / "image_coco-mini.md").read_text()
    assert "FID ↓" in md and "IS ↑ (SD)" in md and "| lavit | 0 | 64.80 | 26.27 | 16.38 (1.27) |" in md


def test_plots_are_pngs(report):
    out, _ = report
    names = sorted(p.name for p in (out / "plots").glob("*.png"))
    assert "caption_coco-mini_CIDEr.png" in names and "caption_coco-mini_BLEU-4.png" in names
    assert "caption_coco-mini_SPICE.png" not in names  # no run has SPICE
    assert "image_coco-mini_FID.png" in names
    with Image.open(out / "plots" / "caption_coco-mini_CIDEr.png") as im:
        assert im.format == "PNG" and im.width > 300
    if os.environ.get("UNIRAG_UPDATE_DOCS_IMAGES"):  # the picture on the docs' report page
        shutil.copy(out / "plots" / "caption_coco-mini_CIDEr.png", DOCS_IMG / "report-caption-cider.png")


def test_gallery_cards_images_and_escaping(report, runs, coco_mini):
    out, _ = report
    page = out / "gallery" / "rag-k1.html"
    p = parse(page)
    assert len(p.cards) == 6  # --max-cards 6 of 8
    assert sum("failed" in c["class"] for c in p.cards) == 1
    # query image + one example image per card (failed card keeps its prompt examples)
    assert all(c["imgs"] == 2 for c in p.cards)
    for src in p.srcs:
        assert not os.path.isabs(src) and (page.parent / src).is_file(), src
    text = "".join(p.text)
    assert EVIL in text and "script" not in p.tags  # shown as text, never as markup
    assert "HTTP 429 <rate limited>" in text
    rows = coco_rows(coco_mini, 12)
    assert rows[8]["captions"][1] in text  # the in-context example's caption
    assert rows[0]["captions"][1] in text  # a reference caption
    per_query = [json.loads(x) for x in (runs["rag1"] / "metrics_per_query.jsonl").read_text().splitlines()]
    assert f"{per_query[0]['CIDEr']:.2f}" in text and "scored as:" in text
    if os.environ.get("UNIRAG_UPDATE_DOCS_IMAGES"):  # the gallery on the docs' report page
        _screenshot(page, DOCS_IMG / "report-gallery.png")


def _screenshot(html: Path, png: Path) -> None:
    """A headless-Chromium picture of a gallery page (found as the page test finds its browser)."""
    import importlib.util

    from playwright.sync_api import sync_playwright

    spec = importlib.util.spec_from_file_location("browser", Path(__file__).parents[1] / "serve" / "browser.py")
    browser = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(browser)
    with sync_playwright() as p:
        executable = browser.find_chromium(p)
        assert executable is not None, browser.INSTALL_HINT
        b = p.chromium.launch(executable_path=executable, headless=True, args=browser.LAUNCH_ARGS)
        try:
            pg = b.new_page(viewport={"width": 1100, "height": 760})
            pg.goto(html.as_uri())
            pg.screenshot(path=str(png), full_page=False)
        finally:
            b.close()


def test_image_gallery_and_index_links(report):
    out, _ = report
    img_page = parse(out / "gallery" / "img-zs.html")
    assert len(img_page.cards) == 4 and all(c["imgs"] == 2 for c in img_page.cards)  # generated + real
    index = parse(out / "index.html")
    for ref in index.hrefs + index.srcs:
        assert (out / ref).is_file(), ref
    assert sum(h.startswith("gallery/") for h in index.hrefs) >= 6


def test_metrics_only_run_gets_a_table_row_and_no_gallery(tmp_path):
    d = tmp_path / "copied"
    d.mkdir()
    (d / "manifest.json").write_text(json.dumps({"task": "image", "generator": "emu2", "mode": "random", "k": 5}))
    (d / "metrics.json").write_text(json.dumps({"task": "image", "metrics": {"FID": 53.92, "CLIP Score": 23.74}}))
    written = build_report([d], tmp_path / "out")
    assert written["galleries"] == [] and "no outputs.jsonl" in written["notes"][0]
    assert "| Random + emu2 | 5 | 53.92 | 23.74 |" in (tmp_path / "out" / "tables.md").read_text()


def test_unevaluated_run_says_what_to_do(tmp_path):
    run = write_run(tmp_path / "r", [{"qid": "a", "caption": "x"}], {"task": "caption"})
    with pytest.raises(InputError, match="unirag evaluate captions"):
        build_report([run], tmp_path / "out")
