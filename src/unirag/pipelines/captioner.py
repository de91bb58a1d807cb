"""``unirag.Captioner``: caption one image (zero-shot or with example image-caption pairs).

The one place where examples become a prompt and a prompt becomes a caption: the caption run
(:mod:`unirag.pipelines.caption`) calls it once per query, a notebook calls it directly, so both
give the same caption for the same image and examples. A generator that picks among the examples'
captions (``retrieval:top1``, ``retrieval:consensus``, an
:class:`~unirag.generators.base.ExampleCaptioner`) is given the captions; any other is given the
prompt rendered from its family's template.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from unirag.data.images import ImageLike, check_image_like
from unirag.errors import BackendError, ConfigError, InputError
from unirag.generators.base import (
    CaptionBackend,
    ExampleCaptioner,
    Generation,
    GenerationOptions,
    TextGenerator,
    Usage,
)
from unirag.generators.pricing import cost_usd, price_for
from unirag.generators.registry import (
    KNOWN_GENERATOR_OPTIONS,
    load_generator,
    parse_spec,
    profile_options,
)
from unirag.messages import Message
from unirag.pipelines.examples import MODES
from unirag.profiles import Settings, resolve
from unirag.prompts.caption import CaptionPrompt, build_caption_prompt, caption_template
from unirag.prompts.official import apply_caption_prompts
from unirag.retrieval.results import Hit, Hits, Pair
from unirag.runs.retry import RetryPolicy, call_with_retry

DEFAULT_GENERATOR = "retrieval:consensus"
#: ``temperature=FROM_PROFILE``: take the ``temperature`` setting of the profile (0.0 in ``default``).
FROM_PROFILE = "profile"


@dataclass
class Caption:
    """A generated caption: ``text``, token ``usage``, ``cost`` in USD (None when the model's price
    is unknown), the ``prompt`` messages sent (empty for example captioners) and the ``examples`` used."""

    text: str
    usage: Usage = field(default_factory=Usage)
    cost: float | None = None
    prompt: list[Message] = field(default_factory=list)
    examples: list[Pair] = field(default_factory=list)
    raw: dict[str, Any] | None = None
    #: the single picture sent to single-image models (examples and query merged), if any
    merged_image: Any = None
    #: calls it took (transient errors - 429, 5xx, timeouts - are retried, see ``Captioner(max_attempts=)``)
    attempts: int = 1

    def __str__(self) -> str:
        return self.text


@dataclass
class CaptionRequest:
    """One prepared call: the examples (their images resolved) and, for prompt-taking generators, the prompt."""

    examples: list[Pair]
    prompt: CaptionPrompt | None


class LazyBackend:
    """The lifecycle :class:`Captioner` and :class:`~unirag.ImageGenerator` share, in one place so that
    they cannot drift apart: the backend is given as a spec (checked at once, loaded on first use by
    ``_load_backend``, released by :meth:`close`) or as a live object the caller owns (never closed
    here); transient errors are retried by ``self.retry``; :meth:`to_dict`'s record rebuilds an equal
    object with :meth:`from_dict`."""

    spec: str
    _backend: Any = None
    _owned: bool = True
    #: the constructor's own arguments (every other keyword goes to the backend); where :meth:`to_dict` puts those
    OWN_OPTIONS: tuple[str, ...] = ()
    OPTIONS_KEY = "generator_options"

    def _open(self, generator: Any, options: dict[str, Any], kinds: Any, parse: Any, wanted: str,
              max_attempts: Any, retry: Any) -> None:
        name = type(self).__name__
        # a keyword no backend takes is refused, with the known ones; ``python:`` plugins take any options
        unknown = sorted(k for k in options if k not in KNOWN_GENERATOR_OPTIONS)
        if unknown and not (isinstance(generator, str) and generator.strip().startswith("python:")):
            known = ", ".join(sorted(set(self.OWN_OPTIONS) | KNOWN_GENERATOR_OPTIONS))
            raise ConfigError(f"{name}: unknown option {unknown[0]!r}" + (f" (and {', '.join(map(repr, unknown[1:]))})"
                                                                          if len(unknown) > 1 else "")
                              + f"; known options: {known}")
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise InputError(f"expected a unirag.runs.retry.RetryPolicy, got {type(retry).__name__}", field="retry")
        self.retry = retry or RetryPolicy()
        if max_attempts is not None:
            if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
                raise InputError(f"expected a positive integer, got {max_attempts!r}", field="max_attempts")
            self.retry = replace(self.retry, max_attempts=max_attempts)
        if isinstance(generator, str):
            parse(generator)  # a bad spec fails here, before anything loads
            self.spec, self._backend, self._owned = generator.strip(), None, True
        elif isinstance(generator, kinds):
            self.spec, self._backend, self._owned = generator.spec, generator, False
        else:
            raise InputError(f"{name} needs {wanted}, got {type(generator).__name__}", field="generator")

    @property
    def backend(self) -> Any:
        """The backend object (loaded from the spec on first use)."""
        if self._backend is None:
            self._backend = self._load_backend()
        return self._backend

    def warm_up(self):
        """Load the backend now rather than at the first call (Haystack's ``warm_up``)."""
        _ = self.backend
        return self

    def close(self) -> None:
        """Release the backend if this object loaded it (GPU memory included); a caller's object stays."""
        if self._backend is not None and self._owned:
            self._backend.close()
            self._backend = None

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]):
        """An object with the settings :meth:`to_dict` recorded (its backend loaded from the spec)."""
        data = dict(data)
        options = data.pop(cls.OPTIONS_KEY, None) or {}
        if isinstance(data.get("profile"), Mapping):
            data["profile"] = Settings.from_dict(data["profile"])
        if "profile" in data:
            data.pop("temperature", None)  # the recorded profile holds the temperature (and any override)
        return cls(data.pop("generator"), **data, **options)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.spec!r})"


class Captioner(LazyBackend):
    """Caption images with a generator, zero-shot or from examples (UniRAG, paper §3.2).

    ``generator``: a spec (``openai:gpt-4o``, ``gemini:gemini-1.5-pro``, ``hf:HUB_ID_OR_DIR``,
    ``retrieval:top1``, ``retrieval:consensus``) or a generator object. ``generator_options`` go to
    the backend (``base_url``, ``timeout``, ``device``, ``dtype``, ``batch_size``, ``family``,
    ``similarity``, ...); an option no backend takes raises :class:`~unirag.errors.ConfigError`
    naming it and the known ones. ``images_root``: the folder relative example image paths are
    relative to. :meth:`caption` retries transient errors (429, 5xx,
    timeouts) with the policy runs use (:class:`unirag.runs.retry.RetryPolicy`: exponential backoff
    with jitter, Retry-After honoured): ``max_attempts`` tries (default 6), or pass ``retry=`` a policy.
    The backend loads on first use or at :meth:`warm_up`; :meth:`close` (or ``with``) releases it.

    ``profile``: a profile name or :class:`unirag.profiles.Settings` (settings ``temperature``:
    ``None`` sends none, as the official code; ``caption_prompts``: the paper's or the official
    wording); ``temperature`` given here overrides the profile's. ``official_prompts``: a checkout
    of castorini/UniRAG whose prompt files ``caption_prompts = official`` reads.
    """

    OWN_OPTIONS = ("max_tokens", "temperature", "templates_dir", "prices", "images_root", "max_attempts", "retry",
                   "profile", "official_prompts")

    def __init__(self, generator: str | CaptionBackend = DEFAULT_GENERATOR, *, max_tokens: int = 400,
                 temperature: float | None | str = FROM_PROFILE, templates_dir: str | Path | None = None,
                 prices: str | Path | Mapping | None = None, images_root: str | Path | None = None,
                 max_attempts: int | None = None, retry: Any = None, profile: Any = None,
                 official_prompts: str | Path | None = None, **generator_options: Any) -> None:
        _check_arg_types(max_tokens=(max_tokens, int), temperature=(temperature, int | float | str | None),
                         templates_dir=(templates_dir, str | Path | None), images_root=(images_root, str | Path | None))
        self._open(generator, generator_options, TextGenerator | ExampleCaptioner, parse_spec,
                   "a generator spec (e.g. 'openai:gpt-4o') or a generator object", max_attempts, retry)
        self.generator_options = {k: v for k, v in generator_options.items() if v is not None}
        given = {} if isinstance(temperature, str) and temperature == FROM_PROFILE else \
            {"temperature": "none" if temperature is None else temperature}
        self.settings = resolve(profile, **given)
        self.official_prompts = official_prompts
        self.options = GenerationOptions(max_tokens=max_tokens, temperature=self.settings["temperature"])
        self.templates_dir = templates_dir
        self.prices = prices
        self.images_root = images_root
        self.price = price_for(self.spec, prices or None)
        self._template = None

    def _load_backend(self) -> CaptionBackend:
        return load_generator(self.spec, **profile_options(self.spec, self.settings, self.generator_options))

    def warm_up(self) -> Captioner:
        """Load the generator (and its prompt template) now rather than at the first caption."""
        super().warm_up()
        _ = self.template
        return self

    @property
    def picks_examples(self) -> bool:
        """True for generators that pick among the examples' captions (they take no prompt)."""
        return isinstance(self.backend, ExampleCaptioner)

    @property
    def template(self):
        """The prompt template of the generator's family (None for example captioners)."""
        if self._template is None and not self.picks_examples:
            family = self.backend.template_family
            self._template = apply_caption_prompts(caption_template(family, self.templates_dir), family,
                                                   self.settings["caption_prompts"], self.official_prompts)
        return self._template

    @property
    def batches(self) -> bool:
        """True when the backend captions several prompts per call (local models)."""
        backend = self.backend
        return isinstance(backend, TextGenerator) and type(backend).generate_batch is not TextGenerator.generate_batch

    # -- captioning --------------------------------------------------------------------------
    def request(self, image: ImageLike, examples: Iterable[Any] = (), *, mode: str = "rag",
                label: str = "query", ahead: Mapping[str, Any] | None = None) -> CaptionRequest:
        """Check the inputs and render the prompt for one image (see :meth:`caption`); ``ahead``: its
        image files already decoded (path -> image, see :func:`unirag.data.images.load_rgb`)."""
        if mode not in MODES:
            raise ConfigError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
        examples = to_pairs(examples, self.images_root)
        if mode == "zero-shot" and examples:
            raise ConfigError(f"zero-shot mode takes no examples, got {len(examples)}")
        if self.picks_examples:
            if mode == "zero-shot":
                raise ConfigError(f"{self.spec} picks among example captions: use mode='rag' (or 'random') "
                                  "with examples")
            return CaptionRequest(examples, None)
        if image is None:
            raise ConfigError("caption() needs the query image")
        prompt = build_caption_prompt(self.template, image, examples, query_label=label, ahead=ahead,
                                      loading=self.settings["image_loading"])
        return CaptionRequest(examples, prompt)

    def sent_prompt(self, prompt: Any) -> str | None:
        """``prompt`` (a :class:`~unirag.prompts.caption.CaptionPrompt`) exactly as the backend sends it
        (None for generators that take no prompt): what ``--save-prompts`` writes to ``NNN_qid.sent.txt``."""
        backend = self.backend
        if prompt is None or not hasattr(backend, "sent_prompt"):
            return None
        return backend.sent_prompt(prompt.messages, self.options)

    def complete(self, request: CaptionRequest, *, captions: Sequence[str] | None = None) -> Caption:
        """Call the generator for a prepared request (``captions``: what an example captioner picks
        from, when not the examples' own captions)."""
        if request.prompt is None:
            gen = self.backend.caption_from_examples(list(captions) if captions is not None else
                                                     [s.caption for s in request.examples])
        else:
            gen = self.backend.generate(request.prompt.messages, self.options)
        return self._caption(request, gen)

    def complete_batch(self, requests: Sequence[CaptionRequest]) -> list[Caption]:
        """Prepared requests in one batched call where the backend batches, else one by one."""
        if not self.batches or any(r.prompt is None for r in requests):
            return [self.complete(r) for r in requests]
        gens = self.backend.generate_batch([r.prompt.messages for r in requests], self.options)
        return [self._caption(r, g) for r, g in zip(requests, gens, strict=True)]

    def caption(self, image: ImageLike, examples: Iterable[Any] = (), *, mode: str = "rag",
                label: str = "query") -> Caption:
        """Caption ``image`` (a path, PIL image, bytes or uint8 array).

        ``examples``: the :class:`unirag.Hits` of :meth:`unirag.Retriever.search` (its pairs are
        used), hits, pairs, or ``(image, caption)`` tuples; best first. ``mode``: "rag" or
        "random" (examples as given) or "zero-shot" (no examples). Raises
        :class:`~unirag.errors.BackendError` when the call fails or returns an empty caption.
        """
        check_image_like(image, "image")
        request = self.request(image, examples, mode=mode, label=label)
        top = examples[0].pair if isinstance(examples, Hits) and examples else None
        # retrieval:top1 on search hits captions with the top hit's own pair, as the paper's code and `unirag
        # caption` do (the first example may come from a later hit when the top one's pair was dropped)
        captions = [top.caption] if request.prompt is None and getattr(self.backend, "strategy", None) == "top1" \
            and top is not None and top.caption else None
        out, attempts = call_with_retry(lambda: self.complete(request, captions=captions), self.retry)
        out.attempts = attempts
        return out

    def _caption(self, request: CaptionRequest, gen: Generation) -> Caption:
        text = gen.text.strip()
        if not text:
            raise BackendError(f"{self.spec} returned an empty caption")
        case = self.settings["caption_lowercase"]
        if case == "all" or (case == "gpt4o" and getattr(self.backend, "template_family", None) == "gpt4o"
                             and not self.picks_examples):
            text = text.lower()  # the official UniRAG code lower-cases GPT replies (setting caption_lowercase)
        prompt = request.prompt
        return Caption(text=text, usage=gen.usage, cost=cost_usd(gen.usage, self.price),
                       prompt=prompt.messages if prompt is not None else [], examples=list(request.examples),
                       raw=gen.raw, merged_image=prompt.merged_image if prompt is not None else None)

    # -- serialisation -----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Settings that rebuild an equal captioner with :meth:`from_dict` (never secrets)."""
        prices = dict(self.prices) if isinstance(self.prices, Mapping) else (str(self.prices) if self.prices else None)
        return {"generator": self.spec, "max_tokens": self.options.max_tokens,
                "temperature": self.options.temperature,
                "templates_dir": str(self.templates_dir) if self.templates_dir else None, "prices": prices,
                "images_root": str(self.images_root) if self.images_root else None,
                "max_attempts": self.retry.max_attempts, "profile": self.settings.to_dict(),
                "official_prompts": str(self.official_prompts) if self.official_prompts else None,
                "generator_options": dict(self.generator_options)}


def to_pairs(examples: Iterable[Any], images_root: str | Path | None = None) -> list[Pair]:
    """Examples in any accepted form -> :class:`~unirag.retrieval.results.Pair` s, in order.

    Accepted: a :class:`~unirag.retrieval.results.Hits` (its ``pairs``), :class:`~unirag.retrieval.results.Hit`
    (its pair; a hit without one is skipped), :class:`~unirag.retrieval.results.Pair`, or an
    ``(image, caption)`` tuple (the image a path or an in-memory image). Relative image paths of
    pairs that carry no images root of their own are joined to ``images_root``.
    """
    if examples is None:
        return []
    items = getattr(examples, "pairs", examples)
    out: list[Pair] = []
    for i, ex in enumerate(items):
        if isinstance(ex, Hit):
            if ex.pair is None:
                continue
            ex = ex.pair
        if isinstance(ex, Pair):
            pair = ex if ex.images_root is not None else ex.rooted(images_root)
        elif isinstance(ex, tuple | list) and len(ex) == 2:
            image, caption = ex
            pair = Pair.of(str(image) if isinstance(image, str | Path) else image, caption).rooted(images_root)
        else:
            raise InputError(f"expected a hit, a pair or an (image, caption) tuple, got {type(ex).__name__}",
                             field=f"examples[{i}]")
        if pair.image is None or not isinstance(pair.caption, str) or not pair.caption.strip():
            raise InputError("an example needs an image and a non-empty caption string", field=f"examples[{i}]")
        out.append(pair)
    return out


def _check_arg_types(**args: tuple[Any, Any]) -> None:
    """InputError naming the first argument whose value is not of its expected type(s)."""
    for name, (value, kind) in args.items():
        if isinstance(value, bool) or not isinstance(value, kind):
            expected = " or ".join("None" if t is type(None) else t.__name__ for t in getattr(kind, "__args__", (kind,)))
            raise InputError(f"expected {expected}, got {type(value).__name__} {value!r}", field=name)
