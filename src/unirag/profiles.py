"""Behaviour settings and the profiles that name sets of them, kept in one place.

Where the papers and their official code disagree, unirag implements both behaviours and names each
choice as one :class:`Setting` (``xr_scoring = paper | official``, ``pair_completion = pool | uniir``,
...). A *profile* is nothing more than a named set of setting values:

* ``default``: the papers as written plus unirag's documented fixes;
* ``official``: the official code's behaviour, bugs included where the official code has one (such
  settings carry ``official_bug``, and the manifest and docs say so).

Code never asks which profile is active; it reads the setting it depends on::

    settings = resolve("official", temperature="0.2")
    settings["xr_scoring"]          # "official"
    settings.to_dict()              # {"profile": "official", "settings": {...}, "overrides": [...]}

Every run manifest records ``settings.to_dict()``. A user may set any one setting alone (CLI option
``--<name with dashes>``, grid option, ``profile=``/keyword in the Python API) on top of a profile.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from unirag.errors import ConfigError

PROFILES = ("default", "official")


@dataclass(frozen=True)
class Setting:
    """One behaviour choice: its name, the allowed values, and its value in each profile."""

    name: str
    default: Any
    official: Any
    help: str
    choices: tuple[Any, ...] | None = None
    #: turns a CLI/YAML string into a value (``None``: the string itself, checked against choices)
    parse: Callable[[str], Any] | None = None
    #: the official file (and line) the ``official`` value follows, e.g. ``"TIGER-AI-Lab/UniIR src/...py:120"``
    cite: str = ""
    #: the official behaviour is a known bug that ``official`` reproduces on purpose
    official_bug: bool = False

    def value_for(self, profile: str) -> Any:
        return self.official if profile == "official" else self.default

    def coerce(self, value: Any) -> Any:
        """Check (and, for strings, parse) a value given by a user for this setting."""
        if isinstance(value, str) and self.parse is not None:
            try:
                value = self.parse(value)
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"setting {self.name!r}: cannot read {value!r} ({exc})") from None
        if self.choices is not None and value not in self.choices:
            known = ", ".join(str(c) for c in self.choices)
            raise ConfigError(f"setting {self.name!r} must be one of {known}; got {value!r}")
        return value


#: Every behaviour setting, by name. Each area adds its rows here (this is the one place).
SETTINGS: dict[str, Setting] = {}


def _register(*settings: Setting) -> None:
    for s in settings:
        if s.name in SETTINGS:
            raise RuntimeError(f"setting {s.name!r} declared twice")
        SETTINGS[s.name] = s


# --- settings -----------------------------------------------------------------------------------
# (Rows are added per area; keep each row's help and cite precise.)


# --- retrieval, generation, metrics (issue 15) ----------------------------------------------------
def _temperature(text: str) -> float | None:
    """``none`` (send no temperature: the provider's or model's default) or a number >= 0."""
    if text.strip().lower() in ("none", "null", "default"):
        return None
    value = float(text)
    if value < 0:
        raise ValueError("a temperature is >= 0")
    return value


_register(
    Setting("pair_completion", "pool", "uniir",
            "How a retrieved single-modality candidate is completed into an image-caption pair. pool: the "
            "pool's own pairing (same source item), else a search with the candidate's stored vector over "
            "the opposite modality. uniir: re-encode the candidate as an instructed M-BEIR query (MSCOCO "
            "task 0 text->image / task 3 image->text instruction, for every dataset) and take the first "
            "hit of the opposite modality in its top 10 whose image path / text differs from the query's.",
            choices=("pool", "uniir"),
            cite="TIGER-AI-Lab/UniIR src/common/mbeir_retriever.py get_raw_retrieved_candidates; "
                 "src/common/interactive_retriever.py:40 (dataset_id 9), :84/:93 (task_id 0/3)"),
    Setting("example_pairs", "per-candidate", "per-hit",
            "Which pairs become few-shot examples. per-candidate: one pair per distinct candidate, the "
            "search widened until k pairs are found. per-hit: every one of the top-10 hits (candidate or "
            "its complement) becomes a pair, an image may repeat, the first k that do not show the query.",
            choices=("per-candidate", "per-hit"),
            cite="castorini/UniRAG src/unirag/incontext_example_provider.py:10-45 (get_candidates)"),
    Setting("temperature", 0.0, None,
            "Sampling temperature sent to caption generators (GPT-4o, Gemini, LLaVA). none: send none "
            "(the provider's / model's default), as the official code does.",
            parse=_temperature,
            cite="castorini/UniRAG src/unirag/caption_generation_inference.py:81 (infer_gemini), infer_gpt, "
                 "infer_llava (no temperature argument)"),
    Setting("caption_prompts", "paper", "official",
            "Caption prompt wording. paper: the paper's Appendix A figures (Gemini's zero-shot prompt "
            "carries the generic system sentence). official: as the official code sends it: Gemini's "
            "zero-shot prompt without the system sentence and its few-shot prompt ending with 'The answer "
            "must be compulsarily in one line.'; with --official-prompts DIR, every family's instruction "
            "text is read from that checkout of castorini/UniRAG.",
            choices=("paper", "official"),
            cite="castorini/UniRAG src/unirag/caption_generation_inference.py:29 (SYSTEM_MESSAGE), :58-61 "
                 "(infer_gemini sends the prompt file alone); src/unirag/prompts/gemini-caption-prompt-with-examples.txt"),
    Setting("emu2_sampling", "unirag", "official",
            "Emu2-Gen sampling when --steps/--guidance are not given. unirag: 25 steps, guidance 4.0 (the "
            "LaVIT settings, for comparable runs). official: the Emu2-Gen pipeline's defaults, 50 steps, "
            "guidance 3.0, 1024x1024.",
            choices=("unirag", "official"),
            cite="castorini/UniRAG src/unirag/image_generation_inference.py (Emu2 pipeline called with "
                 "its defaults); BAAI/Emu2-Gen pipeline_emu2_gen.py __call__ defaults"),
)


@dataclass(frozen=True)
class Settings(Mapping[str, Any]):
    """The resolved value of every setting for one run: a profile plus the user's overrides."""

    profile: str
    values: Mapping[str, Any]
    overrides: tuple[str, ...] = field(default=())

    def __getitem__(self, name: str) -> Any:
        try:
            return self.values[name]
        except KeyError:
            raise KeyError(f"unknown setting {name!r}; known: {', '.join(sorted(self.values))}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.values)

    def __len__(self) -> int:
        return len(self.values)

    def official_bugs(self) -> list[str]:
        """Settings whose value reproduces a known bug of the official code."""
        return sorted(n for n, v in self.values.items()
                      if SETTINGS[n].official_bug and v == SETTINGS[n].official and v != SETTINGS[n].default)

    def to_dict(self) -> dict[str, Any]:
        """What a run manifest records."""
        out: dict[str, Any] = {"profile": self.profile, "settings": dict(self.values),
                               "overrides": list(self.overrides)}
        bugs = self.official_bugs()
        if bugs:
            out["reproduces_official_bugs"] = bugs
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Settings:
        """Settings from a manifest's ``to_dict()``: the profile, with the recorded overrides."""
        recorded = data.get("settings", {})
        base = resolve(data.get("profile", "default"))
        names = tuple(n for n in data.get("overrides", []) if n in recorded)
        unknown = sorted(set(names) - set(SETTINGS))
        if unknown:
            raise ConfigError(f"unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(SETTINGS))}")
        values = dict(base.values)
        values.update({n: SETTINGS[n].coerce(recorded[n]) for n in names})  # a recorded None stays None
        return cls(base.profile, values, tuple(sorted(names)))


def resolve(profile: str | Settings | None = "default", **overrides: Any) -> Settings:
    """The settings of ``profile`` with ``overrides`` (``None`` values are ignored: option not given)."""
    if isinstance(profile, Settings):
        base, given = profile.profile, {n: profile.values[n] for n in profile.overrides}
    else:
        base, given = profile or "default", {}
    if base not in PROFILES:
        raise ConfigError(f"unknown profile {base!r}; known: {', '.join(PROFILES)}")
    given.update({k: v for k, v in overrides.items() if v is not None})
    unknown = sorted(set(given) - set(SETTINGS))
    if unknown:
        raise ConfigError(f"unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(SETTINGS))}")
    values = {name: s.value_for(base) for name, s in SETTINGS.items()}
    for name, value in given.items():
        values[name] = SETTINGS[name].coerce(value)
    return Settings(base, values, tuple(sorted(given)))


def option_name(setting: str) -> str:
    """The CLI option of a setting: ``pair_completion`` -> ``--pair-completion``."""
    return "--" + setting.replace("_", "-")
