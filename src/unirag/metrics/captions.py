"""Caption metrics exactly as the COCO caption toolkit (pycocoevalcap) computes them, x100.

Captions are PTB-tokenized by its Stanford tokenizer, then scored by its BLEU-1..4, METEOR, ROUGE-L,
CIDEr(-D) and, when the CoreNLP jars are found, SPICE scorers; corpus and per-item values come from the
same calls. Differences from calling the toolkit by hand, none of which changes a score: one Java call
tokenizes candidates and references (the tokenizer works line by line, so line/paragraph separators
inside a caption become spaces; the toolkit only replaces ``\\n``), one METEOR process serves every
evaluation of a Python process, and the scorers' console chatter is silenced.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from unirag.errors import ConfigError, InputError
from unirag.metrics.references import load_run_for_scoring, scores_result
from unirag.metrics.spice import find_corenlp, run_spice, spice_unavailable_message
from unirag.metrics.stats import BLEU_STATS, DEFAULT_RESAMPLES, query_intervals_result
from unirag.metrics.text_normalize import strip_answer_prefix, strip_official_prefix
from unirag.runs.rundir import OUTPUTS_FILE

_LINE_BREAKS = str.maketrans({c: " " for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"})


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence stdout/stderr at the file-descriptor level (Java children inherit them)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, devnull):
            os.close(fd)


def bleu_statistics(gts: Mapping[str, list[str]], res: Mapping[str, list[str]]) -> dict[str, list[float]]:
    """Per item, the counts pycocoevalcap's corpus BLEU sums (``[testlen, reflen (closest), guess_1..4,
    correct_1..4]``, from its ``cook_refs``/``cook_test``): :func:`~unirag.metrics.stats.corpus_bleu` turns
    any set of them (a bootstrap resample) back into corpus BLEU."""
    from pycocoevalcap.bleu.bleu_scorer import cook_refs, cook_test

    cooked = {i: cook_test(hyp[0], cook_refs(gts[i]), eff="closest") for i, hyp in res.items()}
    return {i: [float(c["testlen"]), float(c["reflen"]), *map(float, c["guess"]), *map(float, c["correct"])]
            for i, c in cooked.items()}


_METEOR: list[Any] = []  # the one METEOR scorer of this process, reused (see _meteor)
_METEOR_LOCK = threading.Lock()


def _meteor(gts: dict[str, list[str]], res: dict[str, list[str]]) -> tuple[float, list[float]]:
    """METEOR from one Java process kept for the life of this process: starting it loads paraphrase tables
    (about 10 s of CPU, more than scoring thousands of captions). The jar scores each ``EVAL`` line from
    the statistics sent with it, so a reused process scores as a fresh one (tested); one that fails is
    closed and the next call starts another."""
    from pycocoevalcap.meteor.meteor import Meteor

    with _METEOR_LOCK:
        if not _METEOR or _METEOR[0].meteor_p.poll() is not None:
            _close_meteor()
            _METEOR.append(Meteor())
        try:
            return _METEOR[0].compute_score(gts, res)
        except BaseException:
            _close_meteor()
            raise


def _close_meteor() -> None:
    while _METEOR:
        proc = _METEOR.pop().meteor_p
        if proc.stdin:
            proc.stdin.close()
        proc.kill()
        proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream:
                stream.close()


atexit.register(_close_meteor)


def evaluate_caption_run(run_dir: str | Path, queries: str | Path, pool: str | Path, qrels: str | Path | None = None,
                         *, spice_lib: str | Path | None = None, strip_prefixes: bool = True, meteor: bool = True,
                         write: bool = True, resamples: int = DEFAULT_RESAMPLES, bootstrap_seed: int = 0,
                         ci_method: str = "percentile", profile: Any = None) -> dict[str, Any]:
    """Score a caption run directory; writes ``metrics.json`` and ``metrics_per_query.jsonl`` there.

    Failed queries are excluded and counted (``profile``'s ``caption_failed=empty``: scored as the empty
    caption the official code stores), queries with no output yet counted as missing.
    ``caption_prefix_strip=official``: only ``Caption [n]: `` is removed. ``meteor=False`` skips METEOR,
    the slowest scorer and not one the paper reports. ``intervals``: each metric's 95 % bootstrap
    interval over the scored queries (``resamples`` seeded by ``bootstrap_seed``; 0: none).
    """
    settings, run, by_qid, gt = load_run_for_scoring(run_dir, "caption", queries, pool, qrels, profile)
    strip = strip_official_prefix if settings["caption_prefix_strip"] == "official" else strip_answer_prefix
    outputs_path = run.run_dir / OUTPUTS_FILE
    refs = {q: [c.txt for c in cands if c.txt] for q, cands in gt.items()}  # all positive captions
    candidates: dict[str, str] = {}
    no_refs: list[str] = []
    scored = dict(run.ok())
    if settings["caption_failed"] == "empty":  # the official loops store "" for a call that failed
        scored.update({qid: {"caption": ""} for qid in run.failed() if qid in by_qid})
    for qid, rec in scored.items():
        caption = rec.get("caption")
        if not isinstance(caption, str):
            raise InputError("status ok but no caption string", path=outputs_path, line=run.lines[qid],
                             field="caption")
        if not refs[qid]:
            no_refs.append(qid)
            continue
        candidates[qid] = strip(caption) if strip_prefixes else caption
    if not candidates:
        raise InputError(f"no successful captions with references to score ({len(run.failed())} failed, "
                         f"{len(no_refs)} without references)", path=outputs_path)
    order = [q for q in by_qid if q in candidates]
    scores = caption_metrics({q: candidates[q] for q in order}, {q: refs[q] for q in order},
                             spice=True, meteor=meteor, strip_prefixes=False, per_item=True, spice_lib=spice_lib)
    records = {q: {**scores["per_item"][q], BLEU_STATS: scores["bleu_stats"][q]} for q in order}
    per_query = ({"qid": q, "caption_scored": candidates[q], "tokenized": scores["tokenized"][q], **records[q]}
                 for q in order)
    return scores_result(run, by_qid, len(candidates), per_query if write else None, task="caption",
                         metrics=scores["corpus"], skipped=scores["skipped"],
                         intervals=query_intervals_result(records, scores["corpus"], resamples, bootstrap_seed,
                                                          ci_method),
                         settings=settings, queries=queries, pool=pool, scale="x100",
                         n_failed_scored_empty=sum(1 for q in run.failed() if q in candidates),
                         n_no_references=len(no_refs), references="qrels" if qrels else "pos_cand_list",
                         answer_prefixes_stripped=strip_prefixes,
                         n_prefix_stripped=sum(1 for q in candidates if candidates[q] != scored[q]["caption"].strip()),
                         qrels=str(qrels) if qrels else None, seconds=round(scores["seconds"], 3))


def caption_metrics(predictions: Mapping[str, str], references: Mapping[str, Sequence[str]], *,
                    spice: bool = False, meteor: bool = True, strip_prefixes: bool = True, per_item: bool = False,
                    spice_lib: str | Path | None = None) -> dict[str, Any]:
    """COCO caption metrics (x100): BLEU-1..4, METEOR, ROUGE-L, CIDEr and, with ``spice=True``, SPICE.

    ``predictions``: id -> generated caption; ``references``: id -> reference captions (same ids).
    Answer prefixes ("Caption: ...") are stripped as the caption evaluation does. Needs Java.
    With ``per_item=True`` the result is ``{"corpus": {...}, "per_item": {id: {...}}}``, with ``"skipped"``
    (metric -> the one line saying why) and, for :func:`evaluate_caption_run`, ``"tokenized"`` (id -> the
    PTB-tokenized candidate), ``"bleu_stats"`` (id -> BLEU's statistics, see :func:`bleu_statistics`) and
    ``"seconds"``.
    """
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.cider.cider import Cider
    from pycocoevalcap.rouge.rouge import Rouge
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    candidates = {i: strip_answer_prefix(str(c)) if strip_prefixes else str(c) for i, c in predictions.items()}
    if set(candidates) != set(references):
        missing = sorted(set(references) - set(candidates))[:3]
        extra = sorted(set(candidates) - set(references))[:3]
        raise ConfigError(f"predictions and references must have the same ids (missing predictions: {missing}, "
                          f"without references: {extra})")
    if not candidates:
        raise ConfigError("nothing to score")
    empty = [k for k, v in references.items() if not v]
    if empty:
        raise ConfigError(f"{len(empty)} item(s) have no reference caption, e.g. {empty[0]!r}")
    if shutil.which("java") is None:
        raise ConfigError("caption metrics need Java (pycocoevalcap's PTB tokenizer and METEOR are Java "
                          "programs): install a Java runtime (8 or newer, e.g. openjdk-17-jre-headless)")
    start = time.perf_counter()
    ids = list(candidates)
    skipped: dict[str, str] = {}
    with _quiet():  # references and candidates PTB-tokenized in one Java call
        batch = {("g", i): [{"caption": str(r).translate(_LINE_BREAKS)} for r in references[i]] for i in ids}
        batch.update({("r", i): [{"caption": candidates[i].translate(_LINE_BREAKS)}] for i in ids})
        tokens = PTBTokenizer().tokenize(batch)
        gts, res = {i: tokens[("g", i)] for i in ids}, {i: tokens[("r", i)] for i in ids}
        bleu, bleu_items = Bleu(4).compute_score(gts, res, verbose=0)
        rouge, rouge_items = Rouge().compute_score(gts, res)
        cider, cider_items = Cider().compute_score(gts, res)
        meteor_result = _meteor(gts, res) if meteor else None
    scored = [*((f"BLEU-{n + 1}", bleu[n], bleu_items[n]) for n in range(4)), ("ROUGE-L", rouge, rouge_items),
              ("CIDEr", cider, cider_items)]
    if meteor_result is not None:
        scored.insert(4, ("METEOR", *meteor_result))
    else:
        skipped["METEOR"] = "METEOR skipped (--no-meteor)"
    if spice:
        corenlp = find_corenlp(spice_lib)
        if corenlp is None:
            skipped["SPICE"] = spice_unavailable_message(spice_lib)
        else:
            try:
                scored.append(("SPICE", *run_spice(gts, res, corenlp)))
            except (RuntimeError, OSError, ValueError) as e:  # the others are still worth reporting
                skipped["SPICE"] = f"SPICE skipped: {e}"
    corpus = {name: 100.0 * float(value) for name, value, _ in scored}  # BLEU-1..4, METEOR, ROUGE-L, CIDEr, SPICE
    items = {i: {name: 100.0 * float(values[n]) for name, _, values in scored} for n, i in enumerate(ids)}
    if not per_item:
        return corpus
    return {"corpus": corpus, "per_item": items, "skipped": skipped, "tokenized": {i: res[i][0] for i in ids},
            "bleu_stats": bleu_statistics(gts, res), "seconds": time.perf_counter() - start}
