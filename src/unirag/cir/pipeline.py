"""X^R (paper Algorithm 1) over a CIR dataset, stage by stage, with the embedding baseline beside it.

Stages run over all queries at once so agent calls are concurrent across queries:
captions (A_c) -> imagination (A_t^i, A_v^i) -> coarse filtering (A_t^s, A_v^s, RRF -> top-k')
-> questions (A^q) -> judgements (A_t^q, A_v^q) -> re-ranking of the top-k'. Every agent call is cached
on completion (see cache.py), so a killed run resumes without repeating a call. Without agent models
the run is the embedding baseline, and says so. A :class:`Search` ranks one dataset in memory with an
:class:`unirag.XR`'s models and settings (what ``XR.search`` returns from and ``XR.run`` writes the
run folder around).

Where the official X^R code differs from the paper, the run reads a named setting of its profile
(``self.settings``: xr_scoring, xr_stage2_source, xr_rerank, xr_minmax_ties, xr_questions,
xr_max_statements, xr_caption_verifier, xr_prompts, xr_failed_caption, ...; see unirag.profiles and
docs/xr-parity.md).
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from unirag.cir.cache import CallRequest
from unirag.cir.datasets import CirDataset, CirQuery
from unirag.cir.scoring import CoarseResult, coarse, coarse_official, fine, plain, question_score
from unirag.errors import ConfigError, InputError
from unirag.retrieval.results import Hit

#: The stages in run order (``baseline``: the fused reference image + text embedding; ``coarse``:
#: imagination + coarse filtering; ``fine``: + question-based fine filtering, paper Alg. 1) and their
#: names in ``metrics.json`` and ``rankings.jsonl``. Every run computes the baseline.
STAGES = ("baseline", "coarse", "fine")
STAGE_NAMES = {"baseline": "baseline", "coarse": "xr_coarse", "fine": "xr"}
MODALITIES = ("both", "text", "vision")
#: The caption a candidate whose caption call failed is judged on under xr_failed_caption=stand-in
#: (the official default for a missing caption, 01yzzyu/xr.github.io XR/xr.py:831).
FAILED_CAPTION_STAND_IN = "A photo."


@dataclass
class Ablation:
    """Switches for the paper's ablations."""

    imagination: bool = True      # False: coarse ranking = plain fused reference embedding
    fine_only: bool = False       # True: fine filtering on the baseline top-k', question scores alone
    modalities: str = "both"      # "text": caption-side agents only; "vision": image-side agents only

    def __post_init__(self) -> None:
        if self.modalities not in MODALITIES:
            raise ConfigError(f"modalities must be one of {MODALITIES}, got {self.modalities!r}")

    @property
    def text(self) -> bool:
        return self.modalities in ("both", "text")

    @property
    def vision(self) -> bool:
        return self.modalities in ("both", "vision")


@dataclass
class _Q:
    """Per-query working state."""

    q: CirQuery
    cand: np.ndarray                       # pool indices the query ranks (reference removed for CIRR)
    base: np.ndarray = field(default_factory=lambda: np.zeros(0))  # baseline similarity per candidate
    notes: list[str] = field(default_factory=list)
    imag_t: dict | None = None
    imag_v: dict | None = None
    coarse: CoarseResult | None = None
    statements: list[dict] | None = None
    orders: dict[str, np.ndarray] = field(default_factory=dict)   # stage -> candidate positions, best first
    scores: dict[str, dict[str, float]] = field(default_factory=dict)


@dataclass
class Ranking:
    """What :meth:`Search.rank` found, in memory: each query's state (stage orders over
    ``pool_ids``, scores, imagination, statements, notes), the agent-call counts, and the rankings
    of the CIRR subset pass (stage -> qid -> ids; None without one)."""

    pool_ids: list[str]
    qs: list[_Q]
    agent_calls: dict[str, dict[str, int]]
    subsets: dict[str, dict[str, list[str]]] | None = None

    def hits(self, k: int) -> dict[str, list[Hit]]:
        """qid -> the top ``k`` of the last stage that ranked it: score None (a rank, not one
        similarity), ``stage`` its name, ``scores`` the fine stage's scores of the top k' (else empty)."""
        full = stage_rankings(self.qs, self.pool_ids)
        final = [st for st in STAGES if st in full][-1]
        return {x.q.qid: [Hit(did, None, "image", stage=STAGE_NAMES[final], scores=dict(x.scores.get(did, {})))
                          for did in full[final][x.q.qid][:k]] for x in self.qs}


def stage_rankings(qs: list[_Q], pool_ids: list[str]) -> dict[str, dict[str, list[str]]]:
    """stage -> qid -> full ranking of image ids (every query has an order for each stage that ran)."""
    return {st: {x.q.qid: [pool_ids[i] for i in x.cand[x.orders[st]]] for x in qs}
            for st in STAGES if any(st in x.orders for x in qs)}


class Search:
    """One search of a dataset by an :class:`~unirag.cir.xr.XR` (whose models, settings and caches it
    uses): the dataset, the official prompts its stages read and the notes the run reports."""

    def __init__(self, xr: Any, dataset: CirDataset) -> None:
        self.xr, self.ds = xr, dataset
        self.config, self.settings, self.ab, self.stages = xr.config, xr.settings, xr.ab, xr.stages
        self.cache, self.progress, self.echo = xr.cache, xr.progress, xr.echo
        self.notes: list[str] = list(dataset.notes)
        self.official = None  # the official prompts, when an agent stage runs under xr_prompts=official
        # the reply format suffix of an official prompt's call under xr_json_parsing (part of the cache key)
        self.repair = "+json_repair" if self.settings["xr_json_parsing"] == "official" else ""
        self.agents = [st for st in ("coarse", "fine") if st in self.stages]  # the agent stages asked for
        if self.settings["xr_prompts"] == "official" and self.config.roles and self.agents:
            from unirag.cir.official_prompts import OPTIONAL, OfficialPrompts

            # a missing prompt file fails before any file is written or image encoded
            self.official = OfficialPrompts(self.config.official_prompts, self.ds.kind, self.ds.name)
            st, have = self.settings, self.official.optional
            wanted = {"reasoner_v2": st["xr_stage1_schema"] == "both",
                      "rewriter": st["xr_rewrite_caption"] and st["xr_stage1_schema"] == "both"}
            self.optional_run = {what for what, on in wanted.items() if on and what in have}
            for what, on in wanted.items():  # absent: the official fallback skips the stage (XR/xr.py:317, :361)
                if on and what not in have:
                    self.notes.append(f"official prompt file {OPTIONAL[what]} absent: its stage is skipped, as the "
                                      "official code does")
                elif not on and what in have:
                    self.notes.append(f"official prompt file {OPTIONAL[what]} present but not run "
                                      f"(xr_stage1_schema={st['xr_stage1_schema']}, xr_rewrite_caption="
                                      f"{'on' if st['xr_rewrite_caption'] else 'off'})")
        self.missing = dataset.missing_images()  # the pool ids and query ids whose image file is missing

    def rank(self) -> Ranking:
        """X^R over the dataset in memory: the call cache is the only thing written."""
        try:
            pool_ids, qs = self._check_images()
            paths = [self.ds.image_path(i) for i in pool_ids]
            enc = self.xr.encoder()
            ia = self.cache.embeddings("pool-images", enc.fingerprint(), [str(p) for p in paths],
                                       lambda: enc.encode_images(paths, self.progress))
            self.pool_ids, self.paths, self.ia, self.runner = pool_ids, paths, ia, None  # the stages' inputs
            self._baseline(qs)
            if self.agents and not self.config.roles:
                self.echo(f"no agent models configured (--agents): X^R stages {', '.join(self.agents)} skipped; "
                          f"ranking with the embedding baseline ({enc.name} encoder, reference image + text fused)")
                self.notes.append("offline: embedding baseline only, no agent ran")
            elif self.agents:
                self._check_roles()
                self.runner = self.xr.runner()
                self.runner.stats = {}  # this search's agent-call counts
                self._agents(qs, self.config.settings.k_prime)
            return Ranking(pool_ids, qs, self.runner.stats if self.runner else {}, self._subset_pass(qs))
        finally:  # the cache's stores release their locks even when a stage fails or is interrupted
            self.cache.close()

    def _subset_pass(self, qs: list[_Q]) -> dict[str, dict[str, list[str]]] | None:
        """``xr_cirr_subset = rerank``: the official ``--subset`` run (01yzzyu/xr.github.io XR/xr.py:50-53,
        :588-610): each CIRR query ranks only its img_set members without the reference, k' = len(img_set) - 1,
        through the same stages (agent calls already made come from the cache). stage -> qid -> ranking."""
        if self.settings["xr_cirr_subset"] != "rerank" or not any(x.q.subset for x in qs):
            return None
        index = {p: i for i, p in enumerate(self.pool_ids)}
        sub = [_Q(x.q, np.array([index[m] for m in dict.fromkeys(x.q.subset) if m != x.q.reference and m in index],
                                dtype=np.int64)) for x in qs if x.q.subset]
        sub = [x for x in sub if len(x.cand)]
        self._baseline(sub)
        if self.runner is not None:
            size = max(len(x.q.subset) for x in sub) - 1
            self._agents(sub, max(1, min(self.config.settings.k_prime, size)))
        self.notes.append("R_subset from a separate pass over each query's img_set (xr_cirr_subset=rerank)")
        return stage_rankings(sub, self.pool_ids)

    def _check_roles(self) -> None:
        """Every agent role this run's stages and ablations call has a model, before any call."""
        ab, fine_stage, imagine = self.ab, "fine" in self.stages, self.ab.imagination and not self.ab.fine_only
        called = {"caption": (ab.text and not ab.fine_only) or imagine or (fine_stage and ab.text),
                  "text_imagination": imagine, "vision_imagination": imagine and self.official is None,
                  "question": fine_stage, "text_question": fine_stage and ab.text,
                  "vision_question": fine_stage and ab.vision}
        missing = [r for r, on in called.items() if on and r not in self.config.roles]
        if missing:
            raise ConfigError(f"no model configured for the X^R agent role(s) {', '.join(missing)}: add them under "
                              "'roles' (or a 'defaults' model) in the agents YAML, or drop the stage with --stages")

    def _check_images(self) -> tuple[list[str], list[_Q]]:
        pool_missing, ref_missing = self.missing
        gone = set(pool_missing)  # once: a set per pool id made this quadratic in the missing images
        pool_ids = [i for i in self.ds.pool if i not in gone]
        if pool_missing or ref_missing:
            self.notes.append(f"{len(pool_missing)} pool images missing; {len(ref_missing)} queries skipped")
        if not pool_ids:
            raise InputError(f"none of the {len(self.ds.pool)} pool images exist; check --images-root",
                             path=self.ds.images_root)
        everything, skip = np.arange(len(pool_ids)), set(ref_missing)
        index = {p: i for i, p in enumerate(pool_ids)} if self.ds.exclude_reference else {}
        qs = [_Q(q, everything[everything != index.get(q.reference, -1)])
              for q in self.ds.queries if q.qid not in skip]
        if not qs:
            raise InputError("no query has its reference image; check --images-root", path=self.ds.images_root)
        return pool_ids, qs

    def _baseline(self, qs: list[_Q]) -> None:
        """Plain embedding baseline: fused (reference image + modification text) vs candidate images."""
        enc = self.xr.encoder()
        fused = enc.encode_fused([self.ds.reference_path(x.q) for x in qs], [x.q.text for x in qs], self.progress)
        for x, v in zip(qs, fused, strict=True):
            x.base = self.ia[x.cand] @ v
            x.orders["baseline"] = np.argsort(-x.base, kind="stable")

    # -- agent stages -------------------------------------------------------------------------------
    def _captions(self, ids_paths: dict[str, Path]) -> dict[str, str | None]:
        text = self.official.texts["caption"] if self.official is not None else None
        return self.runner.ask("caption", {i: {"image": p, "text": text} for i, p in ids_paths.items()},
                               "A_c captions")

    def _agents(self, qs: list[_Q], k_prime: int) -> None:
        ab = self.ab
        captions: dict[str, str | None] = {}
        if ab.imagination and not ab.fine_only:  # imagination, then coarse filtering
            if ab.text:
                captions.update(self._captions(dict(zip(self.pool_ids, self.paths, strict=True))))
            refs = {x.q.reference: self.ds.reference_path(x.q) for x in qs if x.q.reference not in captions}
            captions.update(self._captions(refs))
            if self.official is not None:
                self._reason_official(qs, captions)
            else:
                self._imagine(qs, captions)
            self._coarse(qs, captions)
        else:
            for x in qs:
                x.coarse = plain(x.base)
        if not ab.fine_only:  # fine-only has no coarse stage of its own (its candidates are the baseline's)
            for x in qs:
                x.orders["coarse"] = x.coarse.order
        if "fine" in self.stages:
            top_ids = {self.pool_ids[c] for x in qs for c in x.cand[x.coarse.order[:k_prime]]}
            if ab.text:  # the top-k' candidates not captioned yet (in pool order)
                captions.update(self._captions({i: p for i, p in zip(self.pool_ids, self.paths, strict=True)
                                                if i in top_ids and i not in captions}))
            self._fine(qs, captions, k_prime)

    def _imagine(self, qs: list[_Q], captions: dict[str, str | None]) -> None:
        t_out = self.runner.ask("text_imagination", {x.q.qid: dict(reference_caption=captions[x.q.reference],
                                                                     modification=x.q.text)
                                                     for x in qs if captions.get(x.q.reference) is not None},
                                "A_t^i imagination")
        v_out = self.runner.ask("vision_imagination", {x.q.qid: dict(image=self.ds.reference_path(x.q),
                                                                       modification=x.q.text)
                                                       for x in qs}, "A_v^i imagination")
        for x in qs:
            x.imag_t, x.imag_v = t_out.get(x.q.qid), v_out[x.q.qid]

    def _reason_official(self, qs: list[_Q], captions: dict[str, str | None]) -> None:
        """The official stage-1 reasoner (the text_imagination role's model) on (C_r, T_m): atomic
        instructions (step1) and target descriptions (step2); no vision imagination.

        As 01yzzyu/xr.github.io XR/xr.py:295-314 (stage1_reason): a reply without JSON gets the dummy
        step1 = [["Modification", T_m]], step2 = [C_r]; an empty step2 becomes [C_r].
        """
        out = self.runner.ask("text_imagination", {
            x.q.qid: {"text": self.official.reasoner(x.q.text, captions[x.q.reference])}
            for x in qs if captions.get(x.q.reference) is not None}, "stage-1 reasoner",
            "official_reasoner" + self.repair)
        answered = [x for x in qs if x.q.qid in out]
        for x in answered:
            c_r, got = captions[x.q.reference], out[x.q.qid]
            if got is None or got.get("no_json"):
                x.notes.append("stage-1 reasoner reply had no JSON: the official stand-in (reference caption) used")
                got = {"step1": [["Modification", x.q.text]], "step2": []}
            step2 = got["step2"] or [c_r]
            x.imag_t = {"target_caption": step2[0], "modifications": [f"{k}: {c}" for k, c in got["step1"]],
                        "descriptions": step2, "step1": got["step1"]}
        self._rewrite_official(answered, captions)

    def _rewrite_official(self, qs: list[_Q], captions: dict[str, str | None]) -> None:
        """The optional cir-v2 reasoner and caption rewriter (xr_stage1_schema=both, xr_rewrite_caption),
        both played by the stage-1 reasoner's model (the official --llm_path).

        As 01yzzyu/xr.github.io XR/xr.py:317-357 and :369-418: the cir-v2 prompt is filled like the
        v1 one; only a query whose cir-v2 reply is a non-empty object gets a rewriter call, whose
        cleaned reply (when not empty) joins the target descriptions, the 'aug' list (:455-458).
        """
        if "reasoner_v2" not in self.optional_run:
            return
        v2_out = self.runner.ask("text_imagination", {
            x.q.qid: {"text": self.official.reasoner(x.q.text, captions[x.q.reference], "reasoner_v2")} for x in qs},
            "stage-1 cir-v2 reasoner", "official_reasoner_v2" + self.repair)
        v2 = {}
        for x in qs:
            got = v2_out[x.q.qid]
            if got is not None and got.get("v2"):
                v2[x.q.qid] = x.imag_t["cir_v2"] = got["v2"]
        if "rewriter" not in self.optional_run or not v2:
            return
        rw_out = self.runner.ask("text_imagination", {
            x.q.qid: {"text": self.official.rewriter(x.q.text, v2[x.q.qid])} for x in qs if x.q.qid in v2},
            "stage-1 caption rewriter", "official_rewriter")
        for x in qs:
            caption = rw_out.get(x.q.qid)
            if caption:
                x.imag_t["rewritten_caption"] = caption
                x.imag_t["descriptions"] = [*x.imag_t["descriptions"], caption]

    def _descriptions(self, x: _Q) -> list[str]:
        """The target descriptions a query is scored on: under xr_scoring=official the official reasoner's
        step2 list, else C_t and C_v; paper scoring takes exactly (C_t, C_v), one failed imagination's
        caption standing in for the other. Empty: imagination failed (noted on the query)."""
        c_t = x.imag_t["target_caption"] if x.imag_t else None
        c_v = x.imag_v["target_caption"] if x.imag_v else None
        if self.settings["xr_scoring"] == "official":
            descs = list(x.imag_t["descriptions"]) if x.imag_t and x.imag_t.get("descriptions") else [
                c for c in (c_t, c_v) if c is not None]
            if not descs:
                x.notes.append("no target description (imagination failed): baseline similarity used")
            return descs
        if c_t is None and c_v is None:
            x.notes.append("imagination failed for both agents: baseline similarity used")
            return []
        if c_t is None or c_v is None:
            x.notes.append(f"{'A_t^i' if c_t is None else 'A_v^i'} failed: the other imagined caption stands in")
        return [c_t or c_v, c_v or c_t]

    def _coarse(self, qs: list[_Q], captions: dict[str, str | None]) -> None:
        """Coarse filtering: paper scoring (A_t^s, A_v^s, RRF; :func:`~unirag.cir.scoring.coarse`) or, under
        xr_scoring=official, every target description scored (1 - tau) image + tau caption, averaged."""
        s, ab, st, pool_ids = self.config.settings, self.ab, self.settings, self.pool_ids
        ca = None
        if ab.text:
            tenc = self.xr.text_encoder()
            have = [n for n, i in enumerate(pool_ids) if captions.get(i)]
            texts = [captions[pool_ids[n]] for n in have]
            ca = np.zeros((len(pool_ids), tenc.dim), dtype=np.float32)  # no caption: no text evidence (0)
            if texts:
                ca[have] = self.cache.embeddings("pool-captions", tenc.fingerprint(), texts,
                                                 lambda: tenc.encode_texts(texts, self.progress))
            n_missing = len(pool_ids) - len(have)
            if n_missing:
                self.notes.append(f"{n_missing} candidates without caption (A_c failed): text similarity 0")
        described = [(x, self._descriptions(x)) for x in qs]
        for x in (x for x, descs in described if not descs):  # no target description: the baseline similarity
            x.coarse = plain(x.base)
        live = [(x, descs) for x, descs in described if descs]
        if not live:
            return
        texts = [d for _, descs in live for d in descs]
        cross = self.xr.encoder().encode_texts(texts)
        text = self.xr.text_encoder().encode_texts(texts) if ab.text else None
        for (x, descs), end in zip(live, itertools.accumulate(len(descs) for _, descs in live), strict=True):
            span = slice(end - len(descs), end)
            cap, img = ca[x.cand] if ca is not None else None, self.ia[x.cand] if ab.vision else None
            t = list(text[span]) if text is not None else None
            if st["xr_scoring"] == "official":
                x.coarse = coarse_official(cap, img, t or [], list(cross[span]), tau=s.tau, rrf_k=s.rrf_k,
                                           source=st["xr_stage2_source"])
            else:
                x.coarse = coarse(cap, img, *(t or (None, None)), *cross[span], rrf_k=s.rrf_k,
                                  source=st["xr_stage2_source"])

    def _question_prompt(self, x: _Q) -> dict[str, Any]:
        if self.official is not None:  # the official stage-2 reasoner on T_m and the atomic instructions
            step1 = x.imag_t["step1"] if x.imag_t and x.imag_t.get("step1") else [["Modification", x.q.text]]
            return {"text": self.official.questions(x.q.text, step1)}
        mods, limit = (x.imag_t["modifications"] if x.imag_t else []), self.settings["xr_max_statements"]
        attrs = x.imag_v["attributes"] if x.imag_v else []
        return dict(modification=x.q.text,
                    statement_limit=(f"Write at most {limit} statements." if limit is not None
                                     else "Write as many statements as the modification text needs."),
                    modifications=json.dumps(mods, ensure_ascii=False) if mods else "(none)",
                    attributes="; ".join(f"{a['attribute']}: {'present' if a['present'] else 'absent'}"
                                         for a in attrs) or "(none)")

    def _judge_requests(self, role: str, x: _Q, **where: Any) -> list[CallRequest]:
        """The verification call(s) of one candidate: one with every statement (xr_questions=batch) or
        one yes/no call per statement (single; 01yzzyu/xr.github.io XR/xr.py:742, :811-836)."""
        if self.settings["xr_questions"] == "single":
            fmt = "yes_no_strict" if role == "text_question" else "yes_no_any"
            return [self.runner.request(role, fmt=fmt, template=f"{role}_single", statement=st["statement"], **where)
                    for st in x.statements]
        listing = "\n".join(f"{i}. {st['statement']}" for i, st in enumerate(x.statements, start=1))
        return [self.runner.request(role, len(x.statements), statements=listing, **where)]

    def _fine(self, qs: list[_Q], captions: dict[str, str | None], k_prime: int) -> None:
        s, ab, st, pool_ids = self.config.settings, self.ab, self.settings, self.pool_ids
        q_out = self.runner.ask("question", {x.q.qid: self._question_prompt(x) for x in qs}, "A^q questions",
                                "official_questions" + self.repair if self.official is not None else None)
        judge: dict[tuple[str, str, int], list[CallRequest]] = {}  # (role, qid, candidate position) -> calls
        # xr_failed_caption=stand-in: a failed caption is judged as "A photo." (01yzzyu/xr.github.io XR/xr.py:831)
        stand_in = FAILED_CAPTION_STAND_IN if st["xr_failed_caption"] == "stand-in" else None
        n_stand_in = 0
        for x in qs:
            out = q_out[x.q.qid]
            if out is None:
                x.notes.append("question agent failed: coarse order kept")
                continue
            x.statements = out["statements"][:st["xr_max_statements"]]  # none: no cap
            if not x.statements:  # xr_json_parsing=official: no question read from the reply (XR/xr.py:696-721)
                x.notes.append("stage-2 reasoner reply gave no [question, answer] pair: no verification, every "
                               "candidate scores 0")
                continue
            for pos in x.coarse.order[:k_prime]:
                did = pool_ids[x.cand[pos]]
                caption = captions.get(did) or stand_in
                if ab.text and caption:
                    n_stand_in += not captions.get(did)  # judged on the stand-in
                    judge["text_question", x.q.qid, int(pos)] = self._judge_requests("text_question", x,
                                                                                    caption=caption)
                if ab.vision:
                    judge["vision_question", x.q.qid, int(pos)] = self._judge_requests(
                        "vision_question", x, image=self.paths[x.cand[pos]])
        if n_stand_in:
            self.notes.append(f"{n_stand_in} caption-path judgement(s) of a candidate without caption (A_c failed) "
                              f"on the stand-in caption {FAILED_CAPTION_STAND_IN!r} (xr_failed_caption=stand-in)")
        answers: dict[str, Any] = {}
        for role in ("text_question", "vision_question"):
            requests = [r for (of, _, _), rs in judge.items() if of == role for r in rs]
            if requests:
                answers.update(self.runner.run(role, requests, desc=f"{role} judgements"))
        got = {where: [answers[r.key] for r in rs] for where, rs in judge.items()}  # None: a failed call
        failed = Counter(qid for (_, qid, _), outs in got.items() for o in outs if o is None)
        if st["xr_questions"] != "single":  # batch: one call's answers (single: one bool per statement)
            got = {where: outs[0]["answers"] if outs[0] else None for where, outs in got.items()}
        bug = st["xr_caption_verifier"] == "bool-bug"
        exact = st["xr_answer_matching"] == "exact-string"
        ties = 0.0 if st["xr_minmax_ties"] == "zero" else 1.0
        weights = (0.5, 0.5) if ab.text and ab.vision else ((1.0, 0.0) if ab.text else (0.0, 1.0))
        extra = (st["xr_scoring"], st["xr_stage2_source"], st["xr_rerank"]) != ("paper", "rrf", "paper")
        for x in qs:
            if x.statements is None:  # the question agent failed: the fine stage keeps the coarse order
                x.orders["fine"] = x.coarse.order
                continue
            expected = [bool(stmt["answer"]) for stmt in x.statements]
            expected_caption = [official_bool(stmt) for stmt in x.statements] if bug else expected
            # exact-string: an answer not written "True"/"False" matches no reply on the image path (None)
            expected_image = [official_answer_string(stmt) for stmt in x.statements] if exact else expected
            top = x.coarse.order[:k_prime]
            sq_t, sq_v = (np.array([question_score(expect, got.get((role, x.q.qid, int(p)))) for p in top])
                          for role, expect in (("text_question", expected_caption),
                                               ("vision_question", expected_image)))
            if failed.get(x.q.qid):
                x.notes.append(f"{failed[x.q.qid]} judgement call(s) failed: scored 0")
            new_top, final = fine(top, x.coarse, sq_t, sq_v, s.lam, s.norm, similarity=not ab.fine_only,
                                  rerank=st["xr_rerank"], ties=ties, weights=weights)
            x.orders["fine"] = np.concatenate([new_top, x.coarse.order[k_prime:]])
            for i, p in enumerate(top):
                rec = {"S_t": float(x.coarse.s_t[p]), "S_v": float(x.coarse.s_v[p]), "rrf": float(x.coarse.rrf[p]),
                       "Sq_t": int(sq_t[i]), "Sq_v": int(sq_v[i]), "final": float(final[i])}
                if extra:
                    rec["similarity"] = float(x.coarse.similarity[p])
                x.scores[pool_ids[x.cand[p]]] = rec


def official_bool(statement: dict) -> bool:
    """The caption path's expected answer under xr_caption_verifier=bool-bug: ``bool(answer as written)``
    (01yzzyu/xr.github.io XR/xr.py:836, :881), so the string "False" counts as True (the official bug).
    unirag's own question agent writes JSON booleans; they stand for the strings "True"/"False" the
    official prompt asks for, so they too count as True."""
    return bool(statement["answer_raw"]) if "answer_raw" in statement else True


def official_answer_string(statement: dict) -> bool | None:
    """The image path's expected answer under xr_answer_matching=exact-string (XR/xr.py:793-795): a reply
    reads as the string 'True' or 'False' and must EQUAL the answer as written, so only the strings
    "True" / "False" can match (None: matches no reply). JSON booleans of unirag's own question agent
    stand for those strings."""
    if "answer_raw" not in statement:
        return bool(statement["answer"])
    raw = statement["answer_raw"]
    return {"True": True, "False": False}.get(raw) if isinstance(raw, str) else None
