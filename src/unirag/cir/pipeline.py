"""X^R (paper Algorithm 1) over a CIR dataset, stage by stage, with the embedding baseline beside it.

Stages run over all queries at once so agent calls are concurrent across queries:
captions (A_c) -> imagination (A_t^i, A_v^i) -> coarse filtering (A_t^s, A_v^s, RRF -> top-k')
-> questions (A^q) -> judgements (A_t^q, A_v^q) -> re-ranking of the top-k'. Every agent call is cached
on completion (see cache.py), so a killed run resumes without repeating a call. Without agent models
the run is the embedding baseline, and says so.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from unirag.cir.agent_runner import AgentRunner, GeneratorFactory
from unirag.cir.agents import build_messages, numbered
from unirag.cir.cache import CallCache, CallRequest
from unirag.cir.config import XRConfig
from unirag.cir.datasets import CirDataset, CirQuery
from unirag.cir.scoring import CoarseResult, coarse, fine, plain, question_score
from unirag.cir.stages import STAGES, parse_stages
from unirag.errors import ConfigError, InputError
from unirag.runs.atomic import atomic_write_json
from unirag.runs.store import RunLock

MODALITIES = ("both", "text", "vision")


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
    base: np.ndarray                       # baseline similarity per candidate
    notes: list[str] = field(default_factory=list)
    imag_t: dict | None = None
    imag_v: dict | None = None
    coarse: CoarseResult | None = None
    statements: list[dict] | None = None
    orders: dict[str, np.ndarray] = field(default_factory=dict)   # stage -> candidate positions, best first
    scores: dict[str, dict[str, float]] = field(default_factory=dict)


class CirRun:
    def __init__(self, dataset: CirDataset, out_dir: str | Path, config: XRConfig | None = None, *,
                 stages: tuple[str, ...] = STAGES, ablation: Ablation | None = None,
                 cache_dir: str | Path | None = None, encoder=None, text_encoder=None,
                 generator_factory: GeneratorFactory | None = None, progress: bool = True,
                 echo: Callable[[str], None] = print, encoder_options: dict[str, Any] | None = None,
                 engine: Any = "local") -> None:
        """``encoder_options``: keywords for loading the encoders (``device``, ``dtype``, ...);
        ``engine``: where local agent models run, "local" or "ray" (see :mod:`unirag.runs.engine`)."""
        stages = parse_stages(stages)
        self.ds, self.out = dataset, Path(out_dir)
        self.config = config or XRConfig()
        self.config.settings.check()
        self.stages = stages
        self.ab = ablation or Ablation()
        self.cache = CallCache(cache_dir or self.out / "cache")
        self._encoder, self._text_encoder = encoder, text_encoder
        self.encoder_options = dict(encoder_options or {})
        self.factory, self.progress, self.echo = generator_factory, progress, echo
        self.engine = engine
        self.notes: list[str] = list(dataset.notes)

    # -- models -------------------------------------------------------------------------------------
    def encoder(self):
        if self._encoder is None:
            from unirag.encoders.registry import load_encoder

            self._encoder = load_encoder(self.config.encoder, **self.encoder_options)
        return self._encoder

    def text_encoder(self):
        """The encoder of caption-caption similarity (A_t^s: C_t, C_v against candidate captions).

        As in the official X^R code, one CLIP encodes images and captions: when the cross-modal
        encoder is a CLIP-family model it serves here too. Sentence embeddings (all-MiniLM-L6-v2)
        are the fallback for the offline default encoder, or whatever ``text_encoder`` names.
        """
        if self._text_encoder is None:
            if self.config.text_encoder is None and not self._offline_encoder():
                self._text_encoder = self.encoder()
            else:
                from unirag.encoders.registry import load_text_encoder

                self._text_encoder = load_text_encoder(self.config.text_encoder,
                                                       device=self.encoder_options.get("device", "auto"))
        return self._text_encoder

    def loaded_encoders(self) -> dict[str, Any]:
        """The encoders this run has loaded so far (to hand to the next run), without loading any."""
        return {name: enc for name, enc in (("encoder", self._encoder), ("text_encoder", self._text_encoder))
                if enc is not None}

    def _offline_encoder(self) -> bool:
        if self._encoder is not None:
            from unirag.encoders.offline import OfflineEncoder

            return isinstance(self._encoder, OfflineEncoder)
        from unirag.encoders.registry import is_offline_name

        return is_offline_name(self.config.encoder)

    # -- run ----------------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        try:
            return self._run()
        finally:  # the cache's stores release their locks even when a stage fails or is interrupted
            self.cache.close()

    def _run(self) -> dict[str, Any]:
        s = self.config.settings
        with RunLock(self.out):
            pool_ids, qs = self._check_images()
            paths = [self.ds.image_path(i) for i in pool_ids]
            enc = self.encoder()
            ia = self.cache.embeddings("pool-images", enc.fingerprint(), [str(p) for p in paths],
                                       lambda: enc.encode_images(paths, self.progress))
            self._baseline(qs, pool_ids, ia)
            agents = [st for st in ("coarse", "fine") if st in self.stages]
            if agents and not self.config.has_agents:
                self.echo(f"no agent models configured (--agents): X^R stages {', '.join(agents)} skipped; "
                          f"ranking with the embedding baseline ({enc.name} encoder, reference image + text fused)")
                self.notes.append("offline: embedding baseline only, no agent ran")
            runner = None
            if agents and self.config.has_agents:
                self._check_roles()
                runner = AgentRunner(self.config, self.cache, self.factory, progress=self.progress, engine=self.engine)
                try:
                    self._agents(runner, qs, pool_ids, paths, ia)
                finally:
                    runner.close()
            return self._write(qs, pool_ids, runner, s)

    def required_roles(self) -> list[str]:
        """The agent roles this run's stages and ablations call."""
        ab, fine_stage = self.ab, "fine" in self.stages
        roles = []
        if (ab.text and not ab.fine_only) or (ab.imagination and not ab.fine_only) or (fine_stage and ab.text):
            roles.append("caption")
        if ab.imagination and not ab.fine_only:
            roles += ["text_imagination", "vision_imagination"]
        if fine_stage:
            roles += ["question"] + (["text_question"] if ab.text else []) + (["vision_question"] if ab.vision else [])
        return roles

    def _check_roles(self) -> None:
        missing = [r for r in self.required_roles() if r not in self.config.roles]
        if missing:
            raise ConfigError(f"no model configured for the X^R agent role(s) {', '.join(missing)}: add them under "
                              "'roles' (or a 'defaults' model) in the agents YAML, or drop the stage with --stages")

    def _check_images(self) -> tuple[list[str], list[_Q]]:
        pool_missing, ref_missing = self.ds.missing_images()
        pool_ids = [i for i in self.ds.pool if i not in set(pool_missing)]
        if pool_missing or ref_missing:
            atomic_write_json(self.out / "missing_images.json", {
                "images_root": str(self.ds.images_root), "pool_missing": pool_missing,
                "queries_with_missing_reference": ref_missing})
            example = self.ds.image_path(pool_missing[0]) if pool_missing else None
            self.echo(f"{len(pool_missing)} of {len(self.ds.pool)} pool images and {len(ref_missing)} reference "
                      f"images missing under {self.ds.images_root}" + (f" (e.g. {example})" if example else "")
                      + f"; listed in {self.out / 'missing_images.json'}")
            self.notes.append(f"{len(pool_missing)} pool images missing; {len(ref_missing)} queries skipped")
        if not pool_ids:
            raise InputError(f"none of the {len(self.ds.pool)} pool images exist; check --images-root",
                             path=self.ds.images_root)
        skip = set(ref_missing)
        index = {p: i for i, p in enumerate(pool_ids)}
        qs = []
        for q in self.ds.queries:
            if q.qid in skip:
                continue
            cand = np.arange(len(pool_ids))
            if self.ds.exclude_reference and q.reference in index:
                cand = cand[cand != index[q.reference]]
            qs.append(_Q(q, cand, np.zeros(0)))
        if not qs:
            raise InputError("no query has its reference image; check --images-root", path=self.ds.images_root)
        return pool_ids, qs

    def _baseline(self, qs: list[_Q], pool_ids: list[str], ia: np.ndarray) -> None:
        """Plain embedding baseline: fused (reference image + modification text) vs candidate images."""
        enc = self.encoder()
        fused = enc.encode_fused([self.ds.reference_path(x.q) for x in qs], [x.q.text for x in qs], self.progress)
        for x, v in zip(qs, fused, strict=True):
            x.base = ia[x.cand] @ v
            x.orders["baseline"] = np.argsort(-x.base, kind="stable")

    # -- agent stages -------------------------------------------------------------------------------
    def _captions(self, runner: AgentRunner, ids_paths: dict[str, Path]) -> dict[str, str | None]:
        reqs = {}
        for i, p in ids_paths.items():
            msgs = build_messages("caption", image=p)
            reqs[i] = CallRequest(runner.key("caption", msgs), msgs)
        out = runner.run("caption", list(reqs.values()), desc="A_c captions")
        return {i: out[r.key] for i, r in reqs.items()}

    def _agents(self, runner: AgentRunner, qs: list[_Q], pool_ids: list[str], paths: list[Path],
                ia: np.ndarray) -> None:
        s, ab = self.config.settings, self.ab
        do_coarse = not ab.fine_only and ab.imagination
        captions: dict[str, str | None] = {}
        if ab.text and do_coarse:
            captions.update(self._captions(runner, dict(zip(pool_ids, paths, strict=True))))
        if ab.imagination and not ab.fine_only:
            refs = {x.q.reference: self.ds.reference_path(x.q) for x in qs if x.q.reference not in captions}
            captions.update(self._captions(runner, refs))
            self._imagine(runner, qs, captions)
        if do_coarse:
            self._coarse(qs, pool_ids, captions, ia)
        else:
            for x in qs:
                x.coarse = plain(x.base)
        if not ab.fine_only:  # fine-only has no coarse stage of its own (its candidates are the baseline's)
            for x in qs:
                x.orders["coarse"] = x.coarse.order
        if "fine" in self.stages:
            top_ids = {pool_ids[c] for x in qs for c in x.cand[x.coarse.order[:s.k_prime]]}
            if ab.text:
                where = {i: n for n, i in enumerate(pool_ids)}
                missing = {i: paths[where[i]] for i in top_ids if i not in captions}
                captions.update(self._captions(runner, missing))
            self._fine(runner, qs, pool_ids, paths, captions)

    def _imagine(self, runner: AgentRunner, qs: list[_Q], captions: dict[str, str | None]) -> None:
        t_reqs, v_reqs = {}, {}
        for x in qs:
            c_r = captions.get(x.q.reference)
            if c_r is not None:
                m = build_messages("text_imagination", reference_caption=c_r, modification=x.q.text)
                t_reqs[x.q.qid] = CallRequest(runner.key("text_imagination", m), m)
            m = build_messages("vision_imagination", image=self.ds.reference_path(x.q), modification=x.q.text)
            v_reqs[x.q.qid] = CallRequest(runner.key("vision_imagination", m), m)
        t_out = runner.run("text_imagination", list(t_reqs.values()), desc="A_t^i imagination")
        v_out = runner.run("vision_imagination", list(v_reqs.values()), desc="A_v^i imagination")
        for x in qs:
            x.imag_t = t_out.get(t_reqs[x.q.qid].key) if x.q.qid in t_reqs else None
            x.imag_v = v_out.get(v_reqs[x.q.qid].key)

    def _coarse(self, qs: list[_Q], pool_ids: list[str], captions: dict[str, str | None], ia: np.ndarray) -> None:
        s, ab = self.config.settings, self.ab
        ca = None
        if ab.text:
            tenc = self.text_encoder()
            have = [n for n, i in enumerate(pool_ids) if captions.get(i)]
            texts = [captions[pool_ids[n]] for n in have]
            ca = np.zeros((len(pool_ids), tenc.dim), dtype=np.float32)  # no caption: no text evidence (0)
            if texts:
                ca[have] = self.cache.embeddings("pool-captions", tenc.fingerprint(), texts,
                                                 lambda: tenc.encode_texts(texts, self.progress))
            n_missing = len(pool_ids) - len(have)
            if n_missing:
                self.notes.append(f"{n_missing} candidates without caption (A_c failed): text similarity 0")
        live = []
        for x in qs:
            c_t = x.imag_t["target_caption"] if x.imag_t else None
            c_v = x.imag_v["target_caption"] if x.imag_v else None
            if c_t is None and c_v is None:
                x.notes.append("imagination failed for both agents: baseline similarity used")
                x.coarse = plain(x.base)
                continue
            if c_t is None or c_v is None:
                x.notes.append(f"{'A_t^i' if c_t is None else 'A_v^i'} failed: the other imagined caption stands in")
            live.append((x, c_t or c_v, c_v or c_t))
        if not live:
            return
        pairs = [t for _, ct, cv in live for t in (ct, cv)]
        cross = self.encoder().encode_texts(pairs)
        text = self.text_encoder().encode_texts(pairs) if ab.text else None
        for j, (x, _, _) in enumerate(live):
            x.coarse = coarse(ca[x.cand] if ca is not None else None, ia[x.cand] if ab.vision else None,
                              text[2 * j] if text is not None else None, text[2 * j + 1] if text is not None else None,
                              cross[2 * j], cross[2 * j + 1], rrf_k=s.rrf_k)

    def _fine(self, runner: AgentRunner, qs: list[_Q], pool_ids: list[str], paths: list[Path],
              captions: dict[str, str | None]) -> None:
        s, ab = self.config.settings, self.ab
        q_reqs = {}
        for x in qs:
            mods = x.imag_t["modifications"] if x.imag_t else []
            attrs = x.imag_v["attributes"] if x.imag_v else []
            m = build_messages("question", modification=x.q.text, max_statements=s.max_statements,
                               modifications=json.dumps(mods, ensure_ascii=False) if mods else "(none)",
                               attributes="; ".join(f"{a['attribute']}: {'present' if a['present'] else 'absent'}"
                                                    for a in attrs) or "(none)")
            q_reqs[x.q.qid] = CallRequest(runner.key("question", m), m)
        q_out = runner.run("question", list(q_reqs.values()), desc="A^q questions")
        judge: dict[str, list[tuple[_Q, int, CallRequest]]] = {"text_question": [], "vision_question": []}
        for x in qs:
            out = q_out[q_reqs[x.q.qid].key]
            if out is None:
                x.notes.append("question agent failed: coarse order kept")
                continue
            x.statements = out["statements"][: s.max_statements]
            listing = numbered([st["statement"] for st in x.statements])
            for pos in x.coarse.order[: s.k_prime]:
                did = pool_ids[x.cand[pos]]
                if ab.text and captions.get(did):
                    m = build_messages("text_question", caption=captions[did], statements=listing)
                    judge["text_question"].append((x, pos, CallRequest(runner.key("text_question", m), m,
                                                                       len(x.statements))))
                if ab.vision:
                    m = build_messages("vision_question", image=paths[x.cand[pos]], statements=listing)
                    judge["vision_question"].append((x, pos, CallRequest(runner.key("vision_question", m), m,
                                                                         len(x.statements))))
        answers = {role: runner.run(role, [r for _, _, r in items], desc=f"{role} judgements")
                   for role, items in judge.items() if items}
        got: dict[tuple[str, str, int], list[bool] | None] = {}
        for role, items in judge.items():
            for x, pos, r in items:
                out = answers[role][r.key]
                got[(role, x.q.qid, int(pos))] = out["answers"] if out else None
        for x in qs:
            if x.statements is None:
                continue
            expected = [bool(st["answer"]) for st in x.statements]
            top = x.coarse.order[: s.k_prime]
            sq = {role: np.array([question_score(expected, got.get((role, x.q.qid, int(p)))) for p in top])
                  for role in judge}
            failed = sum(1 for role in judge for p in top if (role, x.q.qid, int(p)) in got
                         and got[(role, x.q.qid, int(p))] is None)
            if failed:
                x.notes.append(f"{failed} judgement call(s) failed: scored 0")
            new_top, final = fine(top, x.coarse, sq["text_question"], sq["vision_question"], s.lam, s.norm,
                                  similarity=not ab.fine_only)
            x.orders["fine"] = np.concatenate([new_top, x.coarse.order[s.k_prime:]])
            for i, p in enumerate(top):
                x.scores[pool_ids[x.cand[p]]] = {
                    "S_t": float(x.coarse.s_t[p]), "S_v": float(x.coarse.s_v[p]), "rrf": float(x.coarse.rrf[p]),
                    "Sq_t": int(sq["text_question"][i]), "Sq_v": int(sq["vision_question"][i]),
                    "final": float(final[i])}

    # -- outputs ------------------------------------------------------------------------------------
    def _write(self, qs: list[_Q], pool_ids: list[str], runner: AgentRunner | None, s) -> dict[str, Any]:
        from unirag.cir.outputs import write_outputs

        manifest = {
            "config": self.config.manifest(), "stages": list(self.stages),
            "ablation": {"imagination": self.ab.imagination, "fine_only": self.ab.fine_only,
                         "modalities": self.ab.modalities},
            "encoder": getattr(self.encoder(), "name", None), "agent_calls": runner.stats if runner else {},
            "cache_dir": str(self.cache.dir)}
        return write_outputs(self.ds, self.out, qs, pool_ids, s, self.notes, manifest)
