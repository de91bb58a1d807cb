"""What every image generator backend offers: caption (+ example image-caption pairs) -> one image.

The request carries everything a backend may need so that the run loop never sees a wire format; a
backend that cannot take reference images says so up front (``max_examples``) so a misconfigured run
fails before its first call instead of after hours of work.
"""

from __future__ import annotations

import functools
from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any

from unirag.errors import ConfigError
from unirag.generators.base import Backend, Usage
from unirag.profiles import resolve
from unirag.prompts.templates import PromptTemplate, load_template
from unirag.retrieval.results import Pair

# The paper's LaVIT configuration (§4.3 and the official code): 1024x1024, guidance 4.0, 25 steps,
# seed 1234. API backends ignore what their API has no knob for.
DEFAULT_WIDTH = 1024
DEFAULT_HEIGHT = 1024
DEFAULT_STEPS = 25
DEFAULT_GUIDANCE = 4.0
DEFAULT_SEED = 1234
#: Emu2-Gen's pipeline defaults (``EmuVisualGenerationPipeline.__call__``), which the official UniRAG
#: code uses: 1024x1024, 50 steps, guidance 3.0 (setting ``emu2_sampling = official``).
EMU2_PIPELINE_STEPS = 50
EMU2_PIPELINE_GUIDANCE = 3.0


def sampling_defaults(spec: str, settings: Any = None) -> dict[str, Any]:
    """Steps and guidance for a generator when the user gives none: unirag's (the paper's LaVIT run),
    or for ``emu2-gen:`` with ``emu2_sampling = official`` the Emu2-Gen pipeline's own defaults.
    ``settings``: a profile name or :class:`unirag.profiles.Settings`."""
    if str(spec).strip().startswith("emu2-gen:") and resolve(settings)["emu2_sampling"] == "official":
        return {"steps": EMU2_PIPELINE_STEPS, "guidance": EMU2_PIPELINE_GUIDANCE}
    return {"steps": DEFAULT_STEPS, "guidance": DEFAULT_GUIDANCE}


@dataclass
class ImageRequest:
    """One text-to-image call. ``examples`` is empty in zero-shot mode."""

    qid: str
    caption: str
    examples: list[Pair] = field(default_factory=list)  # each pair's image is a file
    width: int = DEFAULT_WIDTH
    height: int = DEFAULT_HEIGHT
    steps: int = DEFAULT_STEPS
    guidance: float = DEFAULT_GUIDANCE
    # One seed for every query (not one per position in the run), so a resumed or reordered run
    # produces the same picture for the same query.
    seed: int = DEFAULT_SEED
    #: the example files already decoded (path -> image, by decode workers): what a local model uses
    #: instead of decoding them again (:func:`unirag.data.images.load_rgb`); never part of the request's identity
    ahead: Any = field(default=None, compare=False, repr=False)
    #: how the example files are decoded: the ``image_loading`` setting (:func:`unirag.data.images.load_rgb`)
    loading: str = field(default="normalised", compare=False, repr=False)


@dataclass
class GeneratedImage:
    """The picture (an RGB ``PIL.Image``) and what is worth recording about the call.

    ``usage``: token counts where the API reports them (the run prices them, see
    :mod:`unirag.generators.pricing`). ``meta`` may hold ``prompt`` (the text as sent),
    ``revised_prompt``, ``source`` (retrieval baseline) - all JSON-serialisable.
    """

    image: Any
    meta: dict[str, Any] = field(default_factory=dict)
    usage: Usage | None = None


class ImageBackend(Backend):
    """Caption (+ examples) -> image. Raises :class:`~unirag.errors.BackendError` on a failed call."""

    #: How many example pairs one call can take: 0 = text only, None = no fixed limit.
    max_examples: int | None = None
    #: At least this many examples are needed (the retrieval baseline needs one to copy).
    min_examples: int = 0
    #: Local models run one query at a time; API backends are run concurrently by the run loop.
    local: bool = False
    #: Prompt template files (prompts/templates/<name>.txt) whose wording this backend sends; their
    #: hashes go into the run identity, so editing one is never mixed into a resumed run.
    templates: tuple[str, ...] = ()

    def check_k(self, k: int) -> None:
        """Fail before the run starts when ``k`` examples cannot be given to this backend."""
        if k < self.min_examples:
            raise ConfigError(f"generator {self.spec!r} needs at least {self.min_examples} example(s) per query; "
                              f"got k={k} (use --mode rag or random with --k >= {self.min_examples})")
        if self.max_examples is not None and k > self.max_examples:
            if self.max_examples == 0:
                raise ConfigError(f"generator {self.spec!r} is text-only and cannot take example images; "
                                  f"use --mode zero-shot (k=0) or a generator that accepts reference images")
            raise ConfigError(f"generator {self.spec!r} takes at most {self.max_examples} example image(s); "
                              f"got k={k}")

    def check_size(self, width: int, height: int) -> None:
        """Fail before the run starts when the backend cannot make ``width`` x ``height`` images."""
        if width <= 0 or height <= 0:
            raise ConfigError(f"image size must be positive, got {width}x{height}")

    def prompt_text(self, request: ImageRequest) -> str:
        """The prompt text this backend sends for ``request`` (saved next to the image)."""
        return request.caption

    @abstractmethod
    def generate(self, request: ImageRequest) -> GeneratedImage:
        """One call."""

    def identity(self) -> dict[str, Any]:
        """The settings besides the spec that change the pictures (dtype, quality...): resume must match."""
        return {}


# Which prompt template each image backend uses (``templates``), and the one rendering rule they share.
# Wording lives in ``prompts/templates/image_*.txt`` (loaded and hashed by :mod:`unirag.prompts.templates`).
ZERO_SHOT = "image_zeroshot"
FEW_SHOT_OMNIGEN = "image_fewshot_omnigen"
FEW_SHOT_API = "image_fewshot_api"
FEW_SHOT_GEMINI = "image_fewshot_gemini"
ALL = (ZERO_SHOT, FEW_SHOT_OMNIGEN, FEW_SHOT_API, FEW_SHOT_GEMINI)

_REQUIRED = {ZERO_SHOT: ("prompt",), FEW_SHOT_OMNIGEN: ("example", "prompt"), FEW_SHOT_API: ("example", "prompt"),
             FEW_SHOT_GEMINI: ("intro", "example", "query")}


@functools.cache
def image_template(name: str) -> PromptTemplate:
    """Loaded once per process (the files are part of the package and do not change during a run)."""
    return load_template(name, required=_REQUIRED.get(name, ()))


def render_listed(name: str, caption: str, example_captions: list[str]) -> str:
    """A single-string few-shot prompt: the ``example`` lines inside ``prompt``; zero-shot if none."""
    if not example_captions:
        return image_template(ZERO_SHOT).fill("prompt", caption=caption)
    tpl = image_template(name)
    lines = [tpl.fill("example", n=i, caption=c) for i, c in enumerate(example_captions, start=1)]
    return tpl.fill("prompt", num=len(example_captions), examples="\n".join(lines), caption=caption)
