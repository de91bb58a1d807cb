"""Caption images zero-shot, with random or with retrieved examples: one resumable run.

``run_captioning(CaptionConfig(...))`` reads the queries, picks each query's examples
(:mod:`unirag.pipelines.examples`), renders the prompt of the generator's template family
(:mod:`unirag.prompts.caption`), calls the generator (concurrently for APIs, batched for local
models), and appends one record per query to ``OUT/outputs.jsonl`` as soon as it is done. A
failed call is stored as ``status: error`` with its message (never as an empty caption) and tried
again by the next run of the same command. The run itself is the one example-driven run
(:mod:`unirag.pipelines.example_run`); this module is its caption hook.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from unirag.data.records import resolve_image
from unirag.errors import BackendError, ConfigError, InputError
from unirag.generators.base import CaptionBackend
from unirag.generators.registry import identity_config, profile_options
from unirag.pipelines.captioner import Captioner, CaptionRequest, to_pairs
from unirag.pipelines.example_run import (
    ExampleJob,
    ExampleRunConfig,
    PreparedQuery,
    load_queries,
    open_remote,
    queries_identity,
    run_job,
)
from unirag.pipelines.examples import example_images_root, make_selector
from unirag.profiles import resolve
from unirag.runs.rundir import PROMPTS_DIR, write_prompt


@dataclass
class CaptionConfig(ExampleRunConfig):
    """One caption run: the options of :class:`ExampleRunConfig` plus ``max_tokens``/``temperature``
    and ``templates_dir`` (your own prompt templates). Examples' image paths start where
    :func:`~unirag.pipelines.examples.example_images_root` says; ``k`` None means 0 zero-shot, 5 for
    ``retrieval:consensus``, else 1.
    ``temperature``: a number, None (send none) or "profile" (the profile's ``temperature`` setting);
    ``official_prompts``: a castorini/UniRAG checkout read by ``caption_prompts = official``."""

    max_tokens: int = 400
    temperature: float | None | str = "profile"
    templates_dir: str | Path | None = None
    official_prompts: str | Path | None = None


def _abs(p: str | Path | None) -> str | None:
    return str(Path(p).resolve()) if p is not None else None


def _request(cfg: CaptionConfig, captioner: Captioner, pool_root: str | Path | None, p: PreparedQuery,
             ahead: dict[str, Any] | None = None) -> CaptionRequest:
    """The captioner's request for a prepared query; ``ahead``: its image files already decoded (path -> image)."""
    try:
        return captioner.request(resolve_image(p.query.img_path, cfg.images_root), to_pairs(p.examples, pool_root),
                                 mode=cfg.mode, label=f"query {p.query.qid}", ahead=ahead)
    except InputError as e:  # a missing/corrupt image fails this query only, naming the file
        raise BackendError(f"bad input: {e}") from None


def caption_job(cfg: CaptionConfig, pool_root: str | Path | None, captioner: Any, selector: Any = None
                ) -> ExampleJob:
    """A caption run's kind: ``selector`` chooses the examples (None on a Ray worker: the driver chose
    them); the captioning itself is :class:`~unirag.pipelines.captioner.Captioner`'s (the same call a
    notebook makes; a worker's loaded model is wrapped in one); this adds the run record."""
    if not isinstance(captioner, Captioner):
        captioner = _captioner(cfg, captioner)
    #: retrieval:top1 over retrieval results captions with the top candidate's caption, as the paper's
    #: code does (see :meth:`unirag.pipelines.examples.RagExamples.top_caption`), not the first example's.
    official_top1 = selector is not None and getattr(captioner.backend, "strategy", None) == "top1" \
        and hasattr(selector, "top_caption")

    def record(p: PreparedQuery, cap: Any) -> dict[str, Any]:
        rec = {"caption": cap.text, "examples": [ex.as_record() for ex in p.examples],
               "usage": asdict(cap.usage), "cost_usd": cap.cost}
        if p.leaks is not None:
            rec["near_duplicates"] = p.leaks
        if cap.raw:
            rec["raw"] = cap.raw
        return rec

    def work_batch(ps: list[PreparedQuery], images: dict[str, Any]) -> list[dict[str, Any]]:
        requests = [_request(cfg, captioner, pool_root, p, images) for p in ps]
        if not official_top1:  # one batched call where the backend batches
            return [record(p, cap) for p, cap in zip(ps, captioner.complete_batch(requests), strict=True)]
        try:
            captions = [[selector.top_caption(p.query)] for p in ps]  # the official baseline: the top hit, unskipped
        except InputError as e:
            raise BackendError(f"bad input: {e}") from None
        return [record(p, captioner.complete(r, captions=c)) for p, r, c in zip(ps, requests, captions, strict=True)]

    def image_paths(ps: Sequence[PreparedQuery]) -> list[str]:
        """The image files the prompts of ``ps`` load (each query's image, then its examples')."""
        images = [image for p in ps for image in (resolve_image(p.query.img_path, cfg.images_root)
                                                  if p.query.img_path else None,
                                                  *(s.image for s in to_pairs(p.examples, pool_root)))]
        return [str(image) for image in images if image is not None and isinstance(image, str | Path)]

    return ExampleJob(work_batch, image_paths, selector, batches=captioner.batches,
                      batch_size=max(1, int(getattr(captioner.backend, "batch_size", 1) or 1)), own_images=1)


def _captioner(cfg: CaptionConfig, generator: Any) -> Captioner:
    return Captioner(generator, max_tokens=cfg.max_tokens, temperature=cfg.temperature,
                     templates_dir=cfg.templates_dir, prices=cfg.prices, profile=cfg.profile,
                     official_prompts=cfg.official_prompts, **cfg.generator_options)


def run_captioning(cfg: CaptionConfig, generator: Captioner | CaptionBackend | None = None) -> dict[str, Any]:
    """Run (or resume) one captioning run into ``cfg.out``. Returns counts and totals.

    ``generator``: a :class:`~unirag.pipelines.captioner.Captioner` or generator object to use
    instead of loading ``cfg.generator`` (the caller keeps ownership; it is not closed here).
    """
    all_queries, queries_path, run_queries = load_queries(cfg)
    for q in all_queries:
        if not q.img_path:
            raise InputError(f"query {q.qid!r} has no image (modality {q.modality.value}); captioning needs image "
                             "queries", path=queries_path, field="query_img_path")
    if cfg.concurrency < 1:
        raise ConfigError("--concurrency must be >= 1")
    with ExitStack() as stack:
        pool = recipe = None
        if generator is None:
            # the model loads on the workers only; they also render the saved prompts in its wire form
            generator, pool, recipe = open_remote(
                stack, "text", cfg.generator, profile_options(cfg.generator, resolve(cfg.profile),
                                                              dict(cfg.generator_options)),
                cfg.engine, ask=True)
        captioner = generator if isinstance(generator, Captioner) else \
            _captioner(cfg, generator if generator is not None else cfg.generator)
        if generator is None:
            stack.callback(captioner.close)
        if cfg.k is None:  # 5 for retrieval:consensus (it votes among the retrieved captions, as the paper's
            # consensus baseline does); else the paper's one-shot
            cfg = replace(cfg, k=0 if cfg.mode == "zero-shot" else 5 if captioner.spec == "retrieval:consensus" else 1)
        if captioner.picks_examples and (cfg.mode == "zero-shot" or cfg.k < 1):
            raise ConfigError(f"{captioner.spec} picks among retrieved captions: use --mode rag with --k >= 1")
        selector = make_selector(cfg.mode, cfg.k, queries=all_queries, pool_path=cfg.pool, retrieval=cfg.retrieval,
                                 index=cfg.index, seed=cfg.seed, query_images_root=cfg.images_root,
                                 profile=captioner.settings, selection=cfg.selection)
        pool_root = example_images_root(cfg.pool_images_root, selector, cfg.images_root)
        job = caption_job(cfg, pool_root, captioner, selector)
        settings = {"generator_config": captioner.backend.config(), "concurrency": cfg.concurrency, "limit": cfg.limit,
                    "max_attempts": cfg.max_attempts, "price": asdict(captioner.price) if captioner.price else None,
                    "prices_file": _abs(cfg.prices) if not isinstance(cfg.prices, dict) else None,
                    "profile": captioner.settings.to_dict()}
        template = captioner.template
        identity = {
            "generator": identity_config(captioner.backend.config()),
            "mode": selector.mode, "k": selector.k, "examples": selector.source(),
            "queries": queries_identity(all_queries, queries_path), "images_root": _abs(cfg.images_root),
            "pool_images_root": _abs(pool_root), "pool": _abs(cfg.pool),
            "seed": cfg.seed, "max_tokens": cfg.max_tokens, "temperature": captioner.options.temperature,
            "templates": [template.manifest_entry()] if template is not None else [],
        }
        open_kind = None
        if pool is not None:  # the workers' jobs: the run's settings without its inputs
            slim = replace(cfg, queries=[], index=None, retrieval=None, engine="local", generator_options={},
                           images_root=_abs(cfg.images_root) or os.getcwd(), templates_dir=_abs(cfg.templates_dir),
                           prices=cfg.prices if isinstance(cfg.prices, dict) or cfg.prices is None else _abs(cfg.prices))
            open_kind = functools.partial(caption_job, slim, _abs(pool_root) or os.getcwd())

        def save_prompts(run: Any) -> None:
            if captioner.picks_examples:
                return
            for i, q in enumerate(run_queries[: cfg.save_prompts]):
                try:
                    p = PreparedQuery(q, selector.select(q))
                    prompt = _request(cfg, captioner, pool_root, p).prompt
                except (InputError, BackendError):
                    continue  # the query itself will fail with this message in the run
                write_prompt(run.out / PROMPTS_DIR, i, q.qid, prompt.messages, prompt.merged_image,
                             extra={"examples": [e.as_record() for e in p.examples]},
                             sent=captioner.sent_prompt(prompt))

        counts, final, totals = run_job(job, cfg, run_queries, "caption", identity, settings, before=save_prompts,
                                        pool=pool, concurrency=cfg.concurrency, decode_ahead=job.batches,
                                        recipe=recipe, open_kind=open_kind, desc="caption")
        return {"out": str(cfg.out), "this_run": counts, "counts": final, "totals": totals, "k": cfg.k}
