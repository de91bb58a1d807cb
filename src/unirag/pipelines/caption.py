"""Caption images zero-shot, with random or with retrieved examples: one resumable run.

``run_captioning(CaptionConfig(...))`` reads the queries, picks each query's examples
(:mod:`unirag.pipelines.examples`), renders the prompt of the generator's template family
(:mod:`unirag.prompts.caption`), calls the generator (concurrently for APIs, batched for local
models), and appends one record per query to ``OUT/outputs.jsonl`` as soon as it is done. A
failed call is stored as ``status: error`` with its message (never as an empty caption) and tried
again by the next run of the same command.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unirag.data.mbeir import read_queries
from unirag.data.records import Query, resolve_image
from unirag.errors import BackendError, ConfigError, InputError
from unirag.generators.base import Generation, GenerationOptions, TextGenerator
from unirag.generators.pricing import Price, cost_usd, load_prices, price_entry, price_for
from unirag.pipelines.examples import Example, ExampleSelector, make_selector
from unirag.pipelines.rundir import RunDir
from unirag.prompts.caption import CaptionPrompt, Shot, build_caption_prompt, caption_template

#: Generator options that change *how* a run is executed, not what it produces (kept out of the
#: resume identity, so a rerun may change them).
_EXECUTION_KEYS = {"base_url", "timeout", "device", "batch_size", "api_key_env"}


@dataclass
class CaptionConfig:
    queries: str | Path
    generator: str
    out: str | Path
    mode: str = "zero-shot"
    k: int = 0
    images_root: str | Path | None = None
    pool_images_root: str | Path | None = None  # where example img_paths are relative to (default: images_root)
    retrieval: str | Path | None = None
    index: str | Path | None = None
    pool: str | Path | None = None
    seed: int = 0
    max_tokens: int = 400
    temperature: float = 0.0
    concurrency: int = 1
    limit: int | None = None
    save_prompts: int = 5
    templates_dir: str | Path | None = None
    prices: str | Path | None = None
    max_attempts: int = 6
    generator_options: dict[str, Any] = field(default_factory=dict)
    progress: bool = True


def _check_queries(queries: list[Query], path: Path) -> None:
    for q in queries:
        if not q.img_path:
            raise InputError(f"query {q.qid!r} has no image (modality {q.modality.value}); captioning needs image "
                             "queries", path=path, field="query_img_path")


def _abs(p: str | Path | None) -> str | None:
    return str(Path(p).resolve()) if p is not None else None


class CaptionJob:
    """Everything one run needs, prepared once; ``work``/``work_batch`` caption queries."""

    def __init__(self, cfg: CaptionConfig, generator: TextGenerator, selector: ExampleSelector,
                 price: Price | None) -> None:
        self.cfg, self.generator, self.selector, self.price = cfg, generator, selector, price
        self.uses_examples = bool(getattr(generator, "uses_examples", False))
        self.template = None if self.uses_examples else caption_template(generator.template_family,
                                                                         cfg.templates_dir)
        self.pool_root = cfg.pool_images_root if cfg.pool_images_root is not None else cfg.images_root
        self.options = GenerationOptions(max_tokens=cfg.max_tokens, temperature=cfg.temperature)

    def examples(self, q: Query) -> list[Example]:
        return self.selector.select(q)

    def prompt(self, q: Query, examples: list[Example]) -> CaptionPrompt:
        shots = [Shot(ex.image_file(self.pool_root), ex.txt, ex.image_did or ex.img_path) for ex in examples]
        return build_caption_prompt(self.template, resolve_image(q.img_path, self.cfg.images_root), shots,
                                    query_label=f"query {q.qid}")

    def _record(self, examples: list[Example], gen: Generation) -> dict[str, Any]:
        text = gen.text.strip()
        if not text:
            raise BackendError(f"{self.generator.spec} returned an empty caption")
        rec = {"caption": text, "examples": [ex.as_dict() for ex in examples], "usage": gen.usage.as_dict(),
               "cost_usd": cost_usd(gen.usage, self.price)}
        if gen.raw:
            rec["raw"] = gen.raw
        return rec

    def work(self, q: Query) -> dict[str, Any]:
        try:
            examples = self.examples(q)
            if self.uses_examples:
                captions = [e.txt for e in examples]
                if getattr(self.generator, "strategy", None) == "top1" and hasattr(self.selector, "top_caption"):
                    captions = [self.selector.top_caption(q)]  # the official baseline: the top hit, unskipped
                return self._record(examples, self.generator.caption_from_examples(captions))
            prompt = self.prompt(q, examples)
        except InputError as e:  # a missing/corrupt image fails this query only, naming the file
            raise BackendError(f"bad input: {e}") from None
        return self._record(examples, self.generator.generate(prompt.messages, self.options))

    def work_batch(self, qs: list[Query]) -> list[dict[str, Any]]:
        prepared = []
        for q in qs:
            try:
                examples = self.examples(q)
                prepared.append((examples, self.prompt(q, examples)))
            except InputError as e:
                raise BackendError(f"bad input: {e}") from None
        gens = self.generator.generate_batch([p.messages for _, p in prepared], self.options)
        return [self._record(ex, g) for (ex, _), g in zip(prepared, gens, strict=True)]


def _identity(cfg: CaptionConfig, generator: TextGenerator, selector: ExampleSelector, job: CaptionJob) -> dict:
    gen_cfg = {k: v for k, v in generator.config().items() if k not in _EXECUTION_KEYS}
    return {
        "generator": gen_cfg,
        "mode": selector.mode, "k": selector.k, "examples": selector.source(),
        "queries": _abs(cfg.queries), "images_root": _abs(cfg.images_root),
        "pool_images_root": _abs(job.pool_root), "pool": _abs(cfg.pool),
        "seed": cfg.seed, "max_tokens": cfg.max_tokens, "temperature": cfg.temperature,
        "templates": [job.template.manifest_entry()] if job.template is not None else [],
    }


def run_captioning(cfg: CaptionConfig, generator: TextGenerator | None = None) -> dict[str, Any]:
    """Run (or resume) one captioning run into ``cfg.out``. Returns counts and totals."""
    queries_path = Path(cfg.queries)
    all_queries = read_queries(queries_path)
    _check_queries(all_queries, queries_path)
    run_queries = all_queries[: cfg.limit] if cfg.limit is not None else all_queries
    if cfg.concurrency < 1:
        raise ConfigError("--concurrency must be >= 1")
    own_generator = generator is None
    if generator is None:
        from unirag.generators.registry import load_text_generator

        generator = load_text_generator(cfg.generator, **cfg.generator_options)
    try:
        if getattr(generator, "uses_examples", False) and (cfg.mode == "zero-shot" or cfg.k < 1):
            raise ConfigError(f"{generator.spec} picks among retrieved captions: use --mode rag with --k >= 1")
        selector = make_selector(cfg.mode, cfg.k, queries=all_queries, pool_path=cfg.pool, retrieval=cfg.retrieval,
                                 index=cfg.index, seed=cfg.seed, query_images_root=cfg.images_root)
        table = load_prices(cfg.prices) if cfg.prices else None
        price = price_for(generator.spec, table)
        job = CaptionJob(cfg, generator, selector, price)
        settings = {"generator_config": generator.config(), "concurrency": cfg.concurrency, "limit": cfg.limit,
                    "max_attempts": cfg.max_attempts, "price": price_entry(price), "prices_file": _abs(cfg.prices)}
        with RunDir(cfg.out, "caption", _identity(cfg, generator, selector, job), settings,
                    save_prompts=cfg.save_prompts) as run:
            done = run.store.done_keys()
            todo = [q for q in run_queries if q.qid not in done]
            selector.prepare(todo)
            if not job.uses_examples:
                _save_prompts(run, job, run_queries)
            counts = _execute(cfg, job, run, run_queries)
            final = run.finish([q.qid for q in run_queries])
            return {"out": str(cfg.out), "this_run": counts, "counts": final, "totals": run.manifest["totals"]}
    finally:
        if own_generator:
            generator.close()


def _save_prompts(run: RunDir, job: CaptionJob, queries: list[Query]) -> None:
    for i, q in enumerate(queries[: run.save_prompts]):
        try:
            examples = job.examples(q)
            prompt = job.prompt(q, examples)
        except InputError:
            continue  # the query itself will fail with this message in the run
        run.save_prompt(i, q.qid, prompt.messages, prompt.merged_image,
                        extra={"examples": [e.as_dict() for e in examples]})


def _execute(cfg: CaptionConfig, job: CaptionJob, run: RunDir, queries: list[Query]) -> dict[str, int]:
    from unirag.runs.retry import RetryPolicy

    key = lambda q: q.qid  # noqa: E731
    batched = type(job.generator).generate_batch is not TextGenerator.generate_batch
    if batched and not job.uses_examples:
        from unirag.pipelines.batching import run_batches

        size = getattr(job.generator, "batch_size", 1)
        return run_batches(queries, key, job.work_batch, run.store, batch_size=size, desc="caption",
                           progress=cfg.progress)
    from unirag.runs.executor import run_items

    return run_items(queries, key, job.work, run.store, concurrency=cfg.concurrency,
                     policy=RetryPolicy(max_attempts=cfg.max_attempts), desc="caption", progress=cfg.progress)
