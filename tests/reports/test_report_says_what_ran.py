"""Reports that say what ran (issue 28, point 3): every row's mode, generator and example selection
come from its manifest (a random run of the offline generator is not a retrieval row), the HTML table
has the CSV's leak-rate column, plots of flat results say why and draw no label over another, and a
gallery of many queries is one line per card until a card is opened."""

from __future__ import annotations

import csv
import json
from html.parser import HTMLParser
from pathlib import Path

import pytest
from eval_run_factory import coco_rows, example, write_caption_task, write_run

from unirag.reports.build import build_report
from unirag.reports.collect import summarize_run
from unirag.reports.gallery import OPEN_CARDS
from unirag.reports.plots import metric_figure

METRICS = {"BLEU-4": 20.0, "CIDEr": 80.0}
N_QUERIES = 30


def _metrics(run: Path, values: dict[str, float]) -> None:
    (run / "metrics.json").write_text(json.dumps({"task": "caption", "metrics": values, "n_scored": 2}))


@pytest.fixture(scope="module")
def runs(tmp_path_factory, coco_mini) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("what_ran")
    rows = coco_rows(coco_mini, 12)
    queries, pool = write_caption_task(tmp, rows[:8])
    base = {"queries": str(queries), "pool": str(pool), "images_root": str(coco_mini), "task": "caption",
            "dataset": "coco-mini", "seed": 3}
    records = [{"qid": f"9:{r['image_id']}", "caption": r["captions"][0], "examples": [example(rows[8])]}
               for r in rows[:8]]
    leaky = [{**rec, "near_duplicates": {"flagged": i % 2, "excluded": 0},
              "examples": [{**example(rows[8]), "near_duplicate": "image-hash:0"}] if i % 2 else rec["examples"]}
             for i, rec in enumerate(records)]
    selection = {"diversity": "mmr", "mmr_lambda": 0.5, "one_per_image": True, "near_duplicates": "report",
                 "pairs_from": [], "where": {"gender": ["Men"]}}
    made = {
        "random": (records, {"generator": "retrieval:consensus", "mode": "random", "k": 3}),
        "top1": (records, {"generator": "retrieval:top1", "mode": "rag", "k": 1, "retriever": "CLIP-SF"}),
        "consensus": (records, {"generator": "retrieval:consensus", "mode": "rag", "k": 5, "retriever": "CLIP-SF"}),
        "mmr3": (leaky, {"generator": "retrieval:consensus", "mode": "rag", "k": 3, "retriever": "CLIP-SF",
                         "identity": {"examples": {"selection": selection}}}),
        "rag1": (records, {"generator": "hf:llava-hf/llava-1.5-7b-hf", "mode": "rag", "k": 1, "retriever": "CLIP-SF"}),
        "rag5": (records, {"generator": "hf:llava-hf/llava-1.5-7b-hf", "mode": "rag", "k": 5, "retriever": "CLIP-SF"}),
    }
    out = {}
    for name, (recs, manifest) in made.items():
        out[name] = write_run(tmp / name, recs, {**base, **manifest})
        _metrics(out[name], METRICS)
    many = [{"qid": f"9:{rows[i % 8]['image_id']}-{i}", "caption": "a caption", "examples": [example(rows[8])]}
            for i in range(N_QUERIES)]
    out["many"] = write_run(tmp / "many", many, {**base, "generator": "hf:x/llava", "mode": "rag", "k": 1})
    _metrics(out["many"], METRICS)
    return out


class Table(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.details: list[bool] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        if tag in ("td", "th"):
            self._cell = []
        if tag == "details":
            self.details.append("open" in dict(attrs))

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def test_rows_say_mode_generator_and_selection_from_the_manifest(runs) -> None:
    random_run = summarize_run(runs["random"])
    assert random_run.mode == "random" and random_run.label == "Random + retrieval:consensus"
    assert random_run.selection == "random (seed 3)"
    assert summarize_run(runs["top1"]).label == "CLIP-SF (top1)"
    assert summarize_run(runs["consensus"]).label == "CLIP-SF (consensus)"
    mmr = summarize_run(runs["mmr3"])
    assert mmr.selection == "mmr λ=0.5, one per image, where gender=Men"
    assert summarize_run(runs["rag1"]).selection == "relevance"


def test_html_table_has_the_csv_columns(runs, tmp_path) -> None:
    out = tmp_path / "report"
    build_report([runs[n] for n in ("random", "top1", "consensus", "mmr3", "rag1", "rag5")], out, gallery=False,
                 plots=False)
    page = Table()
    page.feed((out / "index.html").read_text(encoding="utf-8"))
    head, *body = page.rows
    assert "Leak rate" in head and "mode" in head and "generator" in head and "examples" in head
    by_run = {row[-1]: dict(zip(head, row, strict=True)) for row in body}
    assert by_run["mmr3"]["Leak rate"] == "50.0%" and by_run["rag1"]["Leak rate"] == "-"
    assert by_run["random"]["mode"] == "random" and by_run["random"]["generator"] == "retrieval:consensus"
    assert by_run["mmr3"]["examples"].startswith("mmr λ=0.5")
    with (out / "tables" / "caption_coco-mini.csv").open() as f:
        table = {r["run"]: r for r in csv.DictReader(f)}
    assert table["random"]["mode"] == "random" and table["random"]["row"] == "Random + retrieval:consensus"
    assert table["mmr3"]["selection"] == by_run["mmr3"]["examples"] and table["mmr3"]["leak_rate"] == "0.5000"


def _extents(fig) -> list:
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    texts = [t for t in (ax.title, ax.xaxis.label, ax.yaxis.label, *ax.texts, *fig.texts) if t.get_text()]
    boxes = [t.get_window_extent(renderer) for t in texts]
    legend = ax.get_legend()
    return boxes + ([legend.get_window_extent(renderer)] if legend else []), ax.get_window_extent(renderer)


def test_flat_plots_say_why_and_no_label_overlaps(runs) -> None:
    import matplotlib.pyplot as plt

    summaries = [summarize_run(runs[n]) for n in ("top1", "consensus", "rag1", "rag5", "random")]
    fig, notes = metric_figure("coco-mini", "CIDEr", summaries)
    try:
        labels = fig.axes[0].get_legend_handles_labels()[1]
        assert "CLIP-SF (top1) (retrieval only): 80.00" in labels  # baselines are named in the legend
        assert any(n.startswith("flat: CLIP-SF + llava-1.5-7b-hf scores CIDEr 80.00 at every k") for n in notes)
        assert any("drawn on top of each other" in n and "CLIP-SF (top1)" in n and "CLIP-SF (consensus)" in n
                   for n in notes)
        boxes, axes_box = _extents(fig)
        for i, a in enumerate(boxes):
            for b in boxes[i + 1:]:
                assert not a.overlaps(b), (a, b)
        assert not axes_box.overlaps(boxes[-1])  # the legend is beside the data, not over it
    finally:
        plt.close(fig)


def test_a_large_gallery_is_one_line_per_card_until_opened(runs, tmp_path) -> None:
    out = tmp_path / "report"
    written = build_report([runs["many"]], out, plots=False)
    assert written["cards"]["many"] == N_QUERIES
    page = Table()
    page.feed((out / "gallery" / "many.html").read_text(encoding="utf-8"))
    assert len(page.details) == N_QUERIES and sum(page.details) == OPEN_CARDS < N_QUERIES
