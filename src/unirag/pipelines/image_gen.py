"""Text-to-image runs: captions (+ zero, random or retrieved example pairs) -> PNG files, resumable.

The image half of UniRAG (paper §3.2, §4.3, Table 5): for every caption query, pick k example
image-caption pairs (:mod:`unirag.pipelines.examples`), ask an image generator for a picture and
save it losslessly as ``OUT/images/<qid>.png`` with the prompt that made it beside it
(``<qid>.prompt.json``). The run directory (:mod:`unirag.runs.rundir`) holds one
``outputs.jsonl`` line per query and the manifest; rerunning the same command resumes. API
backends run concurrently, local models one query at a time. The run itself is the one
example-driven run (:mod:`unirag.pipelines.example_run`); this module is its image hook.
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import re
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from unirag.data.images import png_bytes
from unirag.data.records import Query
from unirag.errors import BackendError, ConfigError, InputError
from unirag.generators.base import Usage
from unirag.generators.images.base import (
    DEFAULT_HEIGHT,
    DEFAULT_SEED,
    DEFAULT_WIDTH,
    ImageBackend,
    ImageRequest,
    image_template,
    sampling_defaults,
)
from unirag.generators.pricing import Price, cost_usd, price_for
from unirag.generators.registry import IMAGE, load_generator, profile_options
from unirag.messages import ImagePart, Message, TextPart
from unirag.pipelines.example_run import (
    ExampleJob,
    ExampleRunConfig,
    PreparedQuery,
    load_queries,
    open_remote,
    queries_identity,
    run_job,
)
from unirag.pipelines.examples import ExampleSelector, example_images_root, make_selector
from unirag.profiles import resolve
from unirag.runs.atomic import atomic_write_bytes, atomic_write_json
from unirag.runs.rundir import PROMPTS_DIR, write_prompt

TASK = "image"  # the task name caption/image runs and `unirag evaluate images` agree on
IMAGES_DIR = "images"


def picture_settings(spec: str, profile: Any = None, width: int = DEFAULT_WIDTH, height: int = DEFAULT_HEIGHT,
                     steps: int | None = None, guidance: float | None = None, seed: int = DEFAULT_SEED
                     ) -> dict[str, Any]:
    """The picture settings of every request of a run (defaults: the paper's LaVIT run), part of its
    identity; ``steps``/``guidance`` None: ``spec``'s default under ``profile`` (see ``sampling_defaults``)."""
    fill = sampling_defaults(spec, profile)
    return {"width": width, "height": height, "steps": fill["steps"] if steps is None else steps,
            "guidance": fill["guidance"] if guidance is None else guidance, "seed": seed}


def image_stem(qid: str) -> str:
    """A file name for a qid: readable, and distinct for distinct qids.

    Characters outside ``[A-Za-z0-9._-]`` become ``_``; when that changed anything (``9:6`` and
    ``9_6`` would collide) a short hash of the original qid is appended.
    """
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", str(qid))[:80].lstrip(".") or "_"
    if safe != str(qid):
        safe += "-" + hashlib.sha1(str(qid).encode("utf-8")).hexdigest()[:8]
    return safe


def image_job(generator: ImageBackend, out: Path, images_root: str | Path | None, settings: dict[str, Any],
              price: Price, position: dict[str, int], image_format: str = "png",
              image_loading: str = "normalised", selector: ExampleSelector | None = None,
              top_image: bool = False, k: int | None = None) -> ExampleJob:
    """An image run's kind: a query prepared (examples chosen, by ``selector``; None on a Ray worker:
    the driver chose them) is drawn: PNG, prompt file, record fields. ``position``: the first queries'
    qid -> index, whose prompts are kept (``save_prompts`` of them). ``image_format``: the setting
    (``png`` lossless, or ``jpeg`` at PIL's default quality, as the official run); ``image_loading``:
    how example images decode (``plain``: as the official code); ``top_image``: the official retrieval
    baseline (``image_top1`` top-candidate): the top hit's image, unskipped; ``k``: examples per query,
    checked with the picture size against what the model takes (on a Ray worker: its loaded model).
    One picture per call (diffusers batches only text-only requests)."""
    if k is not None:
        generator.check_k(k)
        generator.check_size(settings["width"], settings["height"])

    def pick(q: Query) -> PreparedQuery:
        ex = selector.top_image(q)
        return PreparedQuery(q, [ex] if ex is not None else [])

    def draw(p: PreparedQuery, images: dict[str, Any] | None) -> dict[str, Any]:
        query, examples = p.query, p.examples
        request = ImageRequest(qid=query.qid, caption=query.txt, examples=[ex.rooted(images_root) for ex in examples],
                               **settings, ahead=images, loading=image_loading)
        try:
            result = generator.generate(request)
        except InputError as e:  # e.g. a missing example image: this query fails, the run goes on
            raise BackendError(str(e)) from None
        meta = dict(result.meta)
        prompt = meta.pop("prompt", None) or generator.prompt_text(request)
        stem = image_stem(query.qid)
        if image_format == "jpeg":  # as the official run saved it: PIL's default JPEG quality (75) (castorini/
            # UniRAG src/unirag/image_generation_inference.py@e9a4e00:82-85, :143-146)
            rel, buf = f"{IMAGES_DIR}/{stem}.jpg", io.BytesIO()
            result.image.convert("RGB").save(buf, format="JPEG")
            atomic_write_bytes(out / rel, buf.getvalue())
        else:
            rel = f"{IMAGES_DIR}/{stem}.png"
            atomic_write_bytes(out / rel, png_bytes(result.image, compress_level=1))
        atomic_write_json(out / IMAGES_DIR / f"{stem}.prompt.json", {
            "qid": query.qid, "caption": query.txt, "generator": generator.spec, "prompt": prompt,
            "examples": [{"id": e.label, "image": str(e.image), "caption": e.caption} for e in request.examples],
            **settings})
        index = position.get(query.qid)
        if index is not None:  # one of the first queries, whose prompts the run keeps
            parts: list[Any] = [ImagePart(path=e.image, label=e.label or f"example {i}")
                                for i, e in enumerate(request.examples, start=1)]  # the example images, then the text
            write_prompt(out / PROMPTS_DIR, index, query.qid, [Message("user", [*parts, TextPart(prompt)])],
                         extra={"image": rel})
        fields: dict[str, Any] = {"caption": query.txt, "image": rel,
                                  "examples": [ex.as_record() for ex in examples],
                                  "size": list(result.image.size)}
        if p.leaks is not None:
            fields["near_duplicates"] = p.leaks
        fields["usage"] = asdict(result.usage) if result.usage is not None else {}
        # No usage reported: free backends (local models, the retrieval baseline) cost 0, others unknown.
        fields["cost_usd"] = cost_usd(result.usage or Usage(), price) if (result.usage or price == Price()) else None
        if meta:
            fields["meta"] = meta
        return fields

    return ExampleJob(lambda ps, images: [draw(p, images) for p in ps],
                      lambda ps: [str(ex.rooted(images_root).image) for p in ps for ex in p.examples],
                      selector, pick=pick if top_image else None)


@dataclass
class ImageConfig(ExampleRunConfig):
    """One image run: the options of :class:`ExampleRunConfig` (queries' ``txt`` is drawn; ``seed``
    chooses random examples, as everywhere) plus the picture settings (see :func:`picture_settings`;
    ``image_seed``: the picture's, None: the profile's ``image_seed`` setting; ``steps``/``guidance``
    None: the generator's default under the run's profile); ``concurrency`` defaults to 4 (image APIs are slow). Examples' image paths
    start where :func:`~unirag.pipelines.examples.example_images_root` says. ``k`` None means 0
    zero-shot, else 1 (the paper's one-shot)."""

    concurrency: int = 4
    width: int = DEFAULT_WIDTH
    height: int = DEFAULT_HEIGHT
    steps: int | None = None
    guidance: float | None = None
    image_seed: int | None = None


def run_images(cfg: ImageConfig, generator: ImageBackend | None = None, *,
               record_queries: bool = True) -> dict[str, int]:
    """Run (or resume) one image run into ``cfg.out``: one picture per query; returns counts
    (ok/error/skipped, and the directory's final ``total_*``).

    ``generator``: a backend object to use instead of loading ``cfg.generator`` (the caller keeps it);
    else the run loads it: on Ray workers when ``cfg.engine`` is "ray" and the spec is a local model
    (see :mod:`unirag.runs.engine`), else here, where the engine options' decode workers decode the
    next queries' example images while a local model draws (see :func:`unirag.data.loader.ahead`). API
    generators send the files as they are and decode nothing. ``record_queries`` False: the identity
    names no queries file, as grid image cells never did (so their runs still resume).
    """
    if cfg.limit is not None and cfg.limit < 1:
        raise ConfigError(f"limit must be >= 1, got {cfg.limit}")
    if cfg.max_attempts < 1:
        raise ConfigError(f"max_attempts must be >= 1, got {cfg.max_attempts}")
    k = cfg.k if cfg.k is not None else 0 if cfg.mode == "zero-shot" else 1
    all_queries, path, queries = load_queries(cfg)
    selector = make_selector(cfg.mode, k, queries=all_queries, pool_path=cfg.pool, retrieval=cfg.retrieval,
                             index=cfg.index, seed=cfg.seed, query_images_root=cfg.images_root,
                             profile=cfg.profile, selection=cfg.selection, supplies="image")
    images_root = example_images_root(cfg.pool_images_root, selector, cfg.images_root)
    profile = resolve(cfg.profile)
    for q in queries:
        if not q.txt:
            raise InputError(f"query {q.qid} has no caption text; text-to-image queries need 'query_txt'",
                             field="query_txt")
    with ExitStack() as stack:
        pool = recipe = None
        if generator is None:
            options = profile_options(cfg.generator, profile, cfg.generator_options, IMAGE)
            generator, pool, recipe = open_remote(stack, "image", cfg.generator, options, cfg.engine)
            if generator is None:
                generator = load_generator(cfg.generator, IMAGE, **options)
                stack.callback(generator.close)
        seed = profile["image_seed"] if cfg.image_seed is None else cfg.image_seed
        settings = picture_settings(generator.spec, profile, cfg.width, cfg.height, cfg.steps, cfg.guidance, seed)
        out = Path(cfg.out)
        templates = {name: image_template(name).manifest_entry() for name in generator.templates}
        identity = {"generator": generator.spec, **generator.identity(), "examples": selector.source(),
                    **settings, "templates": {n: t["sha256"] for n, t in templates.items()}}
        if record_queries:
            identity["queries"] = queries_identity(all_queries, path)
        image_format = profile["image_format"]
        if image_format != "png":  # only when not the default, so runs made before the setting still resume
            identity["image_format"] = image_format
        price = price_for(generator.spec, cfg.prices, image=True, local=generator.local)
        concurrency = 1 if generator.local else max(1, int(cfg.concurrency))
        run_settings = {"generator_config": generator.config(), "images_root": images_root,
                        "concurrency": 1 if generator.local else cfg.concurrency, "templates": templates,
                        "price": asdict(price) if price else None, "prices_file": str(cfg.prices) if cfg.prices else None,
                        "profile": profile.to_dict()}
        position = {q.qid: i for i, q in enumerate(queries[: cfg.save_prompts])}
        top_image = profile["image_top1"] == "top-candidate" and generator.spec.startswith("retrieval:") \
            and hasattr(selector, "top_image")
        common = dict(settings=settings, price=price, position=position, image_format=image_format,
                      image_loading=profile["image_loading"], k=selector.k)
        job = image_job(generator, out, images_root, selector=selector, top_image=top_image, **common)
        open_kind = None
        if pool is not None:  # the worker's job: its model checked, the driver chooses the examples
            root = str(Path(images_root).resolve()) if images_root is not None else os.getcwd()
            open_kind = functools.partial(image_job, out=out.resolve(), images_root=root, **common)
        # A local model draws one query at a time here: its example images decoded a few queries ahead.
        counts, final, _ = run_job(job, cfg, queries, TASK, identity, run_settings, pool=pool,
                                   before=lambda run: (out / IMAGES_DIR).mkdir(parents=True, exist_ok=True),
                                   concurrency=concurrency, decode_ahead=generator.local, recipe=recipe,
                                   open_kind=open_kind, desc=f"images ({generator.spec})")
    return {**counts, **{f"total_{k}": v for k, v in final.items()}}
