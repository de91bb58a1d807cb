"""Caption images zero-shot, with random or with retrieved examples: one resumable run.

``run_captioning(CaptionConfig(...))`` reads the queries, picks each query's examples
(:mod:`unirag.pipelines.examples`), renders the prompt of the generator's template family
(:mod:`unirag.prompts.caption`), calls the generator (concurrently for APIs, batched for local
models), and appends one record per query to ``OUT/outputs.jsonl`` as soon as it is done. A
failed call is stored as ``status: error`` with its message (never as an empty caption) and tried
again by the next run of the same command.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from unirag.data.mbeir import read_queries
from unirag.data.records import Query, resolve_image
from unirag.errors import BackendError, ConfigError, InputError
from unirag.generators.base import CaptionBackend
from unirag.generators.pricing import price_entry
from unirag.generators.registry import identity_config
from unirag.pipelines.captioner import Caption, Captioner, CaptionRequest, to_pairs
from unirag.pipelines.examples import ExampleSelector, example_images_root, make_selector
from unirag.pipelines.run_config import ExampleRunConfig
from unirag.retrieval.results import Pair
from unirag.runs.rundir import RunDir


@dataclass
class CaptionConfig(ExampleRunConfig):
    """One caption run: the options of :class:`ExampleRunConfig` plus ``seed`` (which random examples),
    ``max_tokens``/``temperature`` and ``templates_dir`` (your own prompt templates). Examples' image
    paths start where :func:`~unirag.pipelines.examples.example_images_root` says;
    ``k`` None means :func:`default_k`. ``temperature``: a number, None (send none) or "profile"
    (the profile's ``temperature`` setting); ``official_prompts``: a castorini/UniRAG checkout read by
    ``caption_prompts = official``."""

    seed: int = 0
    max_tokens: int = 400
    temperature: float | None | str = "profile"
    templates_dir: str | Path | None = None
    official_prompts: str | Path | None = None


def default_k(mode: str, generator_spec: str | None) -> int:
    """Examples per query when none is asked for: 0 zero-shot; 5 for ``retrieval:consensus`` (it votes
    among the retrieved captions, as the paper's consensus baseline does); else 1 (the paper's one-shot)."""
    if mode == "zero-shot":
        return 0
    return 5 if (generator_spec or "").strip() == "retrieval:consensus" else 1


def pool_images_root(cfg: CaptionConfig, selector: ExampleSelector) -> str | Path | None:
    """Where the examples' image paths are relative to (:func:`~unirag.pipelines.examples.example_images_root`)."""
    return example_images_root(cfg.pool_images_root, selector, cfg.images_root)


def load_queries(queries: str | Path | Sequence[Query]) -> tuple[list[Query], Path | None]:
    """Queries from a file (and its path) or as given (path None)."""
    if isinstance(queries, str | Path):
        return read_queries(queries), Path(queries)
    return list(queries), None


def queries_identity(queries: list[Query], path: Path | None) -> str:
    """What a run records about its queries: the file, or a digest of in-memory queries' ids and content."""
    if path is not None:
        return str(path.resolve())
    import hashlib
    import json

    from unirag.data.mbeir import query_to_json

    blob = json.dumps([query_to_json(q) for q in queries], sort_keys=True, ensure_ascii=False).encode()
    return f"{len(queries)} queries in memory, sha256 {hashlib.sha256(blob).hexdigest()[:16]}"


def _check_queries(queries: list[Query], path: Path | None) -> None:
    for q in queries:
        if not q.img_path:
            raise InputError(f"query {q.qid!r} has no image (modality {q.modality.value}); captioning needs image "
                             "queries", path=path, field="query_img_path")


def _abs(p: str | Path | None) -> str | None:
    return str(Path(p).resolve()) if p is not None else None


@dataclass
class PreparedQuery:
    """A query with what the driver chose for it: its examples and, for the official ``retrieval:top1``
    baseline, the caption to copy. Picklable: this is what a Ray worker receives."""

    query: Query
    examples: list[Pair]
    captions: list[str] | None = None
    #: the leakage guard's count for these examples (``{"flagged", "excluded"}``; None: guard off)
    leaks: dict[str, int] | None = None


class CaptionJob:
    """A caption run's kind (:class:`~unirag.runs.executor.RunKind`): prepares a query (its examples)
    and turns prepared queries into records.

    The captioning itself is :class:`~unirag.pipelines.captioner.Captioner`'s (the same call a
    notebook makes); this adds example selection and the run record. Selection (:meth:`prepare`)
    and generation (:meth:`work_batch`) are separate steps so that on Ray the driver selects and
    the workers generate (a worker's job, :func:`open_caption_job`, has no selector, only ``pool_root``).
    """

    def __init__(self, cfg: CaptionConfig, captioner: Captioner, selector: ExampleSelector | None,
                 pool_root: str | Path | None = None) -> None:
        self.cfg, self.captioner, self.selector = cfg, captioner, selector
        self.pool_root = pool_images_root(cfg, selector) if selector is not None else pool_root
        #: retrieval:top1 over retrieval results captions with the top candidate's caption, as the paper's
        #: code does (see :func:`unirag.pipelines.examples.top_candidate_caption`), not the first example's.
        self.official_top1 = selector is not None and getattr(captioner.backend, "strategy", None) == "top1" \
            and hasattr(selector, "top_caption")
        #: the model captions ``batch_size`` prompts per call (on Ray, the driver's remote stand-in does
        #: not batch itself but sends its workers' batch size: the items go out that many at a time)
        self.batches = captioner.batches
        self.batch_size = max(1, int(getattr(captioner.backend, "batch_size", 1) or 1))

    @staticmethod
    def key(q: Query) -> str:
        return q.qid

    def n_images(self, queries: Sequence[Query]) -> int:
        return len(queries) * (1 + (self.cfg.k or 0))

    def examples(self, q: Query) -> list[Pair]:
        return self.selector.select(q)

    def request(self, q: Query, examples: list[Pair], ahead: dict[str, Any] | None = None) -> CaptionRequest:
        """``ahead``: the prompt's image files already decoded (path -> image)."""
        try:
            return self.captioner.request(resolve_image(q.img_path, self.cfg.images_root),
                                          to_pairs(examples, self.pool_root), mode=self.cfg.mode,
                                          label=f"query {q.qid}", ahead=ahead)
        except InputError as e:  # a missing/corrupt image fails this query only, naming the file
            raise BackendError(f"bad input: {e}") from None

    @staticmethod
    def _record(examples: list[Pair], cap: Caption, leaks: dict[str, int] | None = None) -> dict[str, Any]:
        rec = {"caption": cap.text, "examples": [ex.as_record() for ex in examples], "usage": cap.usage.as_dict(),
               "cost_usd": cap.cost}
        if leaks is not None:
            rec["near_duplicates"] = leaks
        if cap.raw:
            rec["raw"] = cap.raw
        return rec

    def prepare(self, q: Query) -> PreparedQuery:
        """Choose ``q``'s examples (and the official top-1 caption where that baseline runs)."""
        examples = self.examples(q)
        return PreparedQuery(q, examples, leaks=self.selector.leak_info(q))

    def _work_one(self, p: PreparedQuery, images: dict[str, Any]) -> dict[str, Any]:
        request = self.request(p.query, p.examples, images)
        captions = p.captions
        if request.prompt is None and self.official_top1 and captions is None:
            try:
                captions = [self.selector.top_caption(p.query)]  # the official baseline: the top hit, unskipped
            except InputError as e:
                raise BackendError(f"bad input: {e}") from None
        return self._record(p.examples, self.captioner.complete(request, captions=captions), p.leaks)

    def work_batch(self, ps: list[PreparedQuery], images: dict[str, Any]) -> list[dict[str, Any]]:
        """Records for ``ps`` (in one batched call where the model batches); ``images``: their image
        files decoded ahead (path -> image)."""
        if not self.batches:
            return [self._work_one(p, images) for p in ps]
        requests = [self.request(p.query, p.examples, images) for p in ps]
        return [self._record(p.examples, cap, p.leaks)
                for p, cap in zip(ps, self.captioner.complete_batch(requests), strict=True)]

    def image_paths(self, ps: Sequence[PreparedQuery]) -> list[str]:
        """The image files the prompts of ``ps`` load (each query's image, then its examples')."""
        from unirag.data.images import is_path_like

        paths = []
        for p in ps:
            query_image = resolve_image(p.query.img_path, self.cfg.images_root) if p.query.img_path else None
            for image in [query_image, *(s.image for s in to_pairs(p.examples, self.pool_root))]:
                if image is not None and is_path_like(image):
                    paths.append(str(image))
        return paths


def open_caption_job(cfg: CaptionConfig, pool_root: str | None, backend: Any) -> CaptionJob:
    """A caption run's job on a Ray worker's loaded model (see :mod:`unirag.runs.engine`): the run's
    settings without its inputs (``cfg``) and the examples' root; the driver chooses the examples."""
    captioner = Captioner(backend, max_tokens=cfg.max_tokens, temperature=cfg.temperature,
                          templates_dir=cfg.templates_dir, prices=cfg.prices, profile=cfg.profile,
                          official_prompts=cfg.official_prompts)
    return CaptionJob(cfg, captioner, None, pool_root)


def _identity(cfg: CaptionConfig, captioner: Captioner, selector: ExampleSelector, queries: str) -> dict:
    gen_cfg = identity_config(captioner.config())
    template = captioner.template
    return {
        "generator": gen_cfg,
        "mode": selector.mode, "k": selector.k, "examples": selector.source(),
        "queries": queries, "images_root": _abs(cfg.images_root),
        "pool_images_root": _abs(pool_images_root(cfg, selector)), "pool": _abs(cfg.pool),
        "seed": cfg.seed, "max_tokens": cfg.max_tokens, "temperature": captioner.options.temperature,
        "templates": [template.manifest_entry()] if template is not None else [],
    }


def run_captioning(cfg: CaptionConfig, generator: Captioner | CaptionBackend | None = None) -> dict[str, Any]:
    """Run (or resume) one captioning run into ``cfg.out``. Returns counts and totals.

    ``generator``: a :class:`~unirag.pipelines.captioner.Captioner` or generator object to use
    instead of loading ``cfg.generator`` (the caller keeps ownership; it is not closed here).
    """
    all_queries, queries_path = load_queries(cfg.queries)
    _check_queries(all_queries, queries_path)
    run_queries = all_queries[: cfg.limit] if cfg.limit is not None else all_queries
    if cfg.concurrency < 1:
        raise ConfigError("--concurrency must be >= 1")
    from contextlib import ExitStack

    from unirag.runs.engine import open_pool, runs_on_ray

    stack = ExitStack()
    pool, recipe = None, None
    if generator is None and runs_on_ray(cfg.engine, cfg.generator):
        import functools

        from unirag.pipelines.remote_models import RemoteTextGenerator, TextModelRecipe

        pool = stack.enter_context(open_pool(cfg.engine, cfg.progress))
        from unirag.generators.registry import profile_options
        from unirag.profiles import resolve

        recipe = TextModelRecipe(cfg.generator, profile_options(cfg.generator, resolve(cfg.profile),
                                                                dict(cfg.generator_options)))
        # the model loads on the workers only; they also render the saved prompts in its wire form
        generator = RemoteTextGenerator(pool.describe(recipe), ask=functools.partial(pool.ask, recipe))
    if isinstance(generator, Captioner):
        captioner, owned = generator, False
    else:
        captioner = Captioner(generator if generator is not None else cfg.generator, max_tokens=cfg.max_tokens,
                              temperature=cfg.temperature, templates_dir=cfg.templates_dir, prices=cfg.prices,
                              profile=cfg.profile, official_prompts=cfg.official_prompts, **cfg.generator_options)
        owned = generator is None
    stack.callback(lambda: captioner.close() if owned else None)
    if cfg.k is None:
        cfg = replace(cfg, k=default_k(cfg.mode, captioner.spec))
    with stack:
        if captioner.picks_examples and (cfg.mode == "zero-shot" or cfg.k < 1):
            raise ConfigError(f"{captioner.spec} picks among retrieved captions: use --mode rag with --k >= 1")
        selector = make_selector(cfg.mode, cfg.k, queries=all_queries, pool_path=cfg.pool, retrieval=cfg.retrieval,
                                 index=cfg.index, seed=cfg.seed, query_images_root=cfg.images_root,
                                 profile=captioner.settings, selection=cfg.selection)
        job = CaptionJob(cfg, captioner, selector)
        settings = {"generator_config": captioner.config(), "concurrency": cfg.concurrency, "limit": cfg.limit,
                    "max_attempts": cfg.max_attempts, "price": price_entry(captioner.price),
                    "prices_file": _abs(cfg.prices) if not isinstance(cfg.prices, dict) else None,
                    "profile": captioner.settings.to_dict(), "engine": _engine_entry(cfg.engine, pool)}
        identity = _identity(cfg, captioner, selector, queries_identity(all_queries, queries_path))
        with RunDir(cfg.out, "caption", identity, settings, save_prompts=cfg.save_prompts) as run:
            done = run.store.done_keys()
            todo = [q for q in run_queries if q.qid not in done]
            selector.prepare(todo)
            if not captioner.picks_examples:
                _save_prompts(run, job, run_queries)
            counts = _execute(cfg, job, run, run_queries, pool, recipe)
            final = run.finish([q.qid for q in run_queries])
            return {"out": str(cfg.out), "this_run": counts, "counts": final, "totals": run.manifest["totals"],
                    "k": cfg.k}


def _engine_entry(engine: Any, pool: Any) -> dict[str, Any]:
    """What the manifest's settings record about where the run ran (not part of its identity)."""
    from unirag.runs.engine import engine_options

    entry = engine_options(engine).to_dict()
    if pool is None:
        entry["engine"] = "local"
    return entry


def _execute(cfg: CaptionConfig, job: CaptionJob, run: RunDir, queries: list[Query], pool: Any,
             recipe: Any) -> dict[str, int]:
    """The generation step: here, or on the pool's workers (examples are chosen here, one batch ahead)."""
    import functools
    import os

    from unirag.runs.executor import execute
    from unirag.runs.retry import RetryPolicy

    open_kind = None
    if pool is not None:
        slim = replace(cfg, queries=[], index=None, retrieval=None, engine="local",
                       images_root=_abs(cfg.images_root) or os.getcwd(), templates_dir=_abs(cfg.templates_dir),
                       prices=cfg.prices if isinstance(cfg.prices, dict) or cfg.prices is None else _abs(cfg.prices))
        open_kind = functools.partial(open_caption_job, slim, _abs(job.pool_root) or os.getcwd())
    return execute(job, queries, run.store, concurrency=cfg.concurrency,
                   policy=RetryPolicy(max_attempts=cfg.max_attempts), decode_ahead=job.batches,
                   engine=cfg.engine, pool=pool, recipe=recipe, open_kind=open_kind,
                   desc="caption", progress=cfg.progress)


def _save_prompts(run: RunDir, job: CaptionJob, queries: list[Query]) -> None:
    for i, q in enumerate(queries[: run.save_prompts]):
        try:
            examples = job.examples(q)
            prompt = job.request(q, examples).prompt
        except (InputError, BackendError):
            continue  # the query itself will fail with this message in the run
        run.save_prompt(i, q.qid, prompt.messages, prompt.merged_image,
                        extra={"examples": [e.as_record() for e in examples]},
                        sent=job.captioner.sent_prompt(prompt))
