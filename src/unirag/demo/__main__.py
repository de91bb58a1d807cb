"""Run the offline demo: ``python -m unirag.demo [--out DIR]`` (what ``make demo`` calls)."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

from unirag.cli.main import cli
from unirag.data.mbeir import load_pool, read_queries
from unirag.demo import SAMPLE
from unirag.runs.rundir import read_run_dir


def _run(args: list[str], unless: Path | None = None, newer_than: Path | None = None) -> None:
    """Run one CLI command in-process; skip it when its (atomically written) output already exists
    (and, with ``newer_than``, was written after that input: a resumed run that added records is
    scored again)."""
    if unless is not None and unless.exists() and (
            newer_than is None or unless.stat().st_mtime_ns >= newer_than.stat().st_mtime_ns):
        print(f"\n(reusing {unless})", flush=True)
        return
    print(f"\n$ unirag {shlex.join(args)}", flush=True)
    start = time.perf_counter()
    cli.main(args=args, standalone_mode=False)
    print(f"  ({time.perf_counter() - start:.1f} s)", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="demo-output", help="output folder (default: demo-output)")
    parser.add_argument("--k", type=int, default=5, help="few-shot examples per query (default: 5)")
    opts = parser.parse_args(argv)
    out = Path(opts.out)
    data, runs = out / "data", out / "runs"
    images = str(SAMPLE / "images")
    k = str(opts.k)

    if not (data / "import_summary.json").exists():
        _run(["import", "coco", "--captions", str(SAMPLE / "captions.json"), "--images", images, "--out", str(data)])
    if not (out / "index" / "manifest.json").exists():
        _run(["index", "build", "--pool", str(data / "pool.jsonl"), "--images-root", images,
              "--out", str(out / "index")])
    i2t, t2i = data / "queries_task3_image2text.jsonl", data / "queries_task0_text2image.jsonl"
    # Retrieval quality: each query's own positives count as hits.
    directions = (("image2text", i2t, "text", "qrels_task3.txt"), ("text2image", t2i, "image", "qrels_task0.txt"))
    for name, queries, modality, _ in directions:
        _run(["retrieve", "--index", str(out / "index"), "--queries", str(queries), "--images-root", images,
              "--k", "10", "--modality", modality, "--out", str(runs / f"{name}.jsonl")], unless=runs / f"{name}.jsonl")
    for name, _, _, qrels in directions:
        _run(["evaluate", "retrieval", "--run", str(runs / f"{name}.jsonl"), "--qrels", str(data / qrels),
              "--k", "1,5,10", "--out", str(runs / f"{name}.metrics.json")])
    # Few-shot examples for captioning must not contain the query's own captions (leakage-free): its
    # positives are excluded by id, near-duplicate copies of its photo or captions by content, and
    # no two examples show the same photo (unirag.Selection; docs/selection.md).
    _run(["retrieve", "--index", str(out / "index"), "--queries", str(i2t), "--images-root", images,
          "--k", k, "--modality", "text", "--exclude-positives", str(data / "qrels_task3.txt"),
          "--set", "near_duplicates=exclude", "--set", "one_per_image=on",
          "--out", str(runs / "image2text.noleak.jsonl")], unless=runs / "image2text.noleak.jsonl")
    # Paper rows 1a (top-1 retrieved caption) and the consensus captioner over the top k.
    top1_dir, cap_dir = runs / "caption-top1-rag-k1", runs / f"caption-consensus-rag-k{k}"
    for generator, kk, run_dir in (("retrieval:top1", "1", top1_dir), ("retrieval:consensus", k, cap_dir)):
        _run(["caption", "--queries", str(i2t), "--images-root", images, "--generator", generator,
              "--mode", "rag", "--k", kk, "--retrieval", str(runs / "image2text.noleak.jsonl"),
              "--pool", str(data / "pool.jsonl"), "--out", str(run_dir), "--no-progress"])
        _run(["evaluate", "captions", "--run", str(run_dir), "--queries", str(i2t), "--pool", str(data / "pool.jsonl")],
             unless=run_dir / "metrics.json", newer_than=run_dir / "outputs.jsonl")

    # The two rows compared on the same 51 queries: differences, paired intervals, significance (†).
    _run(["report", str(top1_dir), str(cap_dir), "--baseline", str(top1_dir), "--out", str(out / "report")])

    _summary(runs, data, top1_dir, cap_dir)
    print(f"\nAll outputs are in {out}/; the HTML gallery is {out / 'report' / 'index.html'}.\n"
          "Rerun `make demo` to reuse them; delete the folder to start over.")
    return 0


def _summary(runs: Path, data: Path, top1_dir: Path, cap_dir: Path) -> None:
    """A few of the generated captions, then one short table of what the demo measured."""
    pool = load_pool(data / "pool.jsonl")
    records = list(read_run_dir(cap_dir).ok().values())[:3]
    print("\nA few generated captions (offline consensus captioner, RAG k examples, no leakage):")
    queries = {q.qid: q for q in read_queries(data / "queries_task3_image2text.jsonl")}
    for r in records:
        q = queries.get(r["qid"])
        truth = [pool[d].txt for d in (q.pos_cand_list if q else []) if d in pool][:2]
        print(f"- {q.img_path if q else r['qid']}\n    generated: {r.get('caption')}\n"
              f"    reference: {' | '.join(truth)}")
    print("\nSummary (offline encoder, bundled COCO sample)")
    print(f"  {'retrieval':<22}{'hit@1':>8}{'hit@5':>8}{'hit@10':>8}{'MRR@10':>8}")
    for name, run in (("image -> caption", "image2text"), ("caption -> image", "text2image")):
        m = json.loads((runs / f"{run}.metrics.json").read_text())["metrics"]
        print(f"  {name:<22}" + "".join(f"{m[key]:>8.3f}" for key in ("hit@1", "hit@5", "hit@10", "mrr@10")))
    names = ["BLEU-1", "BLEU-4", "METEOR", "ROUGE-L", "CIDEr"]
    print(f"  {'captioning (x100)':<22}" + "".join(f"{n:>9}" for n in names))
    for name, run_dir in (("top-1 caption, k=1", top1_dir), ("consensus, RAG", cap_dir)):
        cap = json.loads((run_dir / "metrics.json").read_text())["metrics"]
        print(f"  {name:<22}" + "".join(f"{cap[n]:>9.2f}" if n in cap else f"{'-':>9}" for n in names))

if __name__ == "__main__":
    sys.exit(main())
