"""X^R configuration: which model plays each agent role, and the retrieval settings.

YAML layout (see ``examples/xr_agents.yaml``)::

    defaults: {model: "openai:gpt-4o-mini", base_url: "http://127.0.0.1:8000/v1", temperature: 0}
    roles:
      caption: {model: "hf:/models/llava", max_tokens: 120}
      text_imagination: {}          # inherits defaults
    encoder: null                   # cross-modal encoder spec (null = offline default)
    text_encoder: null              # caption-caption similarity: null = the CLIP encoder above
                                    # (MiniLM only with the offline default encoder)
    settings: {lambda: 0.5, k_prime: 100, concurrency: 4, decode_workers: auto}
    profile: default                # or official (docs/xr-parity.md); any X^R setting of
                                    # unirag.profiles may also go under settings (xr_scoring: official)
    official_prompts: null          # the official X^R checkout, read under xr_prompts=official

Defaults follow the official X^R code where the paper is silent (01yzzyu/xr.github.io,
``XR/xr.py:1561``: ``--top_k`` 100 = k', ``:1543`` ``--rrf_k`` 60; ``XR/utils/inference_entrypoint_ray.py:809-857``
``clip_extact_feature_ray`` embeds images and captions with one CLIP model).

Generation options (max_tokens, temperature, seed, repetition_penalty) go to every call; any other key of a role
(base_url, api_key_env, device, ...) is passed to the generator factory. API keys are never
accepted in the file: backends read them from the environment.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from unirag.cir.agents import ROLES
from unirag.cir.scoring import NORMS
from unirag.data.text import read_yaml_mapping
from unirag.errors import ConfigError, InputError
from unirag.generators.registry import identity_config
from unirag.profiles import SETTINGS, Settings, resolve

#: A role's generation options (sent with every call) and how a YAML value of each is read.
GEN_KEYS = {"max_tokens": int, "temperature": float, "seed": int, "repetition_penalty": float}
DEFAULT_MAX_TOKENS = 400  # a role built outside a run (no profile applied yet)
_SECRET_KEYS = ("api_key", "key", "token", "secret", "password")


@dataclass
class RoleConfig:
    model: str
    max_tokens: int | None = None   # None: the profile's xr_max_new_tokens (xr_caption_max_new_tokens for captions)
    temperature: float = 0.0
    seed: int | None = None
    #: None: the profile's xr_caption_repetition_penalty for captions, none for the other roles
    repetition_penalty: float | None = None
    options: dict[str, Any] = field(default_factory=dict)  # passed to load_generator

    def generation_options(self):
        from unirag.generators.base import GenerationOptions

        return GenerationOptions(max_tokens=self.max_tokens if self.max_tokens is not None else DEFAULT_MAX_TOKENS,
                                 temperature=self.temperature, seed=self.seed,
                                 repetition_penalty=self.repetition_penalty)

    def fingerprint(self) -> str:
        """Identifies what the replies depend on (model, options), for the call cache keys."""
        opts = identity_config(self.options)
        gen: list[Any] = [self.max_tokens, self.temperature, self.seed]
        if self.repetition_penalty is not None:  # only when set, so the keys of earlier caches stay valid
            gen.append(["repetition_penalty", self.repetition_penalty])
        blob = json.dumps({"model": self.model, "gen": gen, "options": opts}, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass
class XRSettings:
    lam: float = 0.5
    k_prime: int = 100   # official X^R code's --top_k; with k' = 50 = the metric depth, fine filtering could not move R@50
    k: int = 50
    rrf_k: int = 60
    norm: str = "minmax"
    concurrency: int = 4
    json_attempts: int = 3
    tau: float = 0.15    # caption weight of xr_scoring=official (the official --tau)
    #: processes that decode the next agent calls' images for roles played by a local (hf:) model:
    #: None/"auto" (the cores available, at most 8; fewer than 128 images inline) or N (0 = inline)
    decode_workers: int | str | None = None

    def __post_init__(self) -> None:  # every way a config is made is checked (YAML, Python, overrides)
        for name, weight in (("lambda", self.lam), ("tau", self.tau)):
            if not 0.0 <= weight <= 1.0:
                raise ConfigError(f"{name} must lie in [0, 1], got {weight}")
        for name in ("k_prime", "k", "rrf_k", "concurrency", "json_attempts"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.norm not in NORMS:
            raise ConfigError(f"norm must be one of {NORMS}, got {self.norm!r}")
        from unirag.runs.engine import EngineOptions

        EngineOptions(decode_workers=self.decode_workers)  # refuses a bad setting


@dataclass
class XRConfig:
    roles: dict[str, RoleConfig] = field(default_factory=dict)
    encoder: str | None = None
    text_encoder: str | None = None
    settings: XRSettings = field(default_factory=XRSettings)
    #: the profile the YAML names (``profile:``) and the X^R settings it sets (``settings: {xr_...: ...}``)
    profile: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    #: the user's checkout of the official X^R code (read when xr_prompts = official)
    official_prompts: str | None = None

    def resolve_settings(self, profile: str | Settings | None = None, **overrides: Any) -> Settings:
        """The run's behaviour settings: ``profile`` (else the YAML's, else default), the YAML's
        settings below the keywords given here (a :class:`Settings` keeps its own overrides on top)."""
        if isinstance(profile, Settings):
            base: str | Settings = profile
            given = {n: v for n, v in self.overrides.items() if n not in profile.overrides}
        else:
            base, given = (profile or self.profile or "default"), dict(self.overrides)
        given.update({k: v for k, v in overrides.items() if v is not None})
        return resolve(base, **given)

    def apply_profile_defaults(self, settings: Settings) -> None:
        """Fill what the config leaves unset from ``settings`` (xr_encoder, xr_agent_model, the max
        new tokens); what the user set is kept. Idempotent."""
        if self.encoder is None:
            self.encoder = settings["xr_encoder"]
        if not self.roles and settings["xr_agent_model"] is not None:
            self.roles = {r: RoleConfig(model=settings["xr_agent_model"]) for r in ROLES}
        for role, rc in self.roles.items():
            if rc.max_tokens is None:
                rc.max_tokens = settings["xr_caption_max_new_tokens" if role == "caption" else "xr_max_new_tokens"]
            if role == "caption" and rc.repetition_penalty is None:
                rc.repetition_penalty = settings["xr_caption_repetition_penalty"]

    def manifest(self) -> dict[str, Any]:
        """What a run records about its configuration (no secrets: they are never in the config)."""
        return {k: v for k, v in asdict(self).items() if k not in ("profile", "overrides")}


def load_config(path: str | Path | XRConfig | None, *, encoder: str | None = None,
                official_prompts: str | Path | None = None, **settings: Any) -> XRConfig:
    """The agents config a call works on: the agents YAML parsed, a copy of an :class:`XRConfig` (the
    caller's is never changed), or ``None``: the offline configuration (no agents); ``encoder``,
    ``official_prompts`` and :class:`XRSettings` fields (``k_prime=``...) on top (None: not given)."""
    config = copy.deepcopy(path) if isinstance(path, XRConfig) else XRConfig() if path is None else _read_config(path)
    if encoder is not None:
        config.encoder = encoder
    if official_prompts is not None:
        config.official_prompts = str(official_prompts)
    config.settings = replace(config.settings, **{n: v for n, v in settings.items() if v is not None})
    return config


def _read_config(path: str | Path) -> XRConfig:
    path = Path(path)
    raw = read_yaml_mapping(path, "agents config")
    unknown = set(raw) - {"defaults", "roles", "encoder", "text_encoder", "settings", "profile", "official_prompts"}
    if unknown:
        raise InputError(f"unknown key(s) {sorted(unknown)}", path=path, field=sorted(unknown)[0])
    defaults = raw.get("defaults") or {}
    roles_raw = raw.get("roles") or {}
    if not isinstance(defaults, dict) or not isinstance(roles_raw, dict):
        raise InputError("'defaults' and 'roles' must be mappings", path=path)
    bad = set(roles_raw) - set(ROLES)
    if bad:
        raise InputError(f"unknown agent role(s) {sorted(bad)}; roles are {', '.join(ROLES)}", path=path,
                         field=f"roles.{sorted(bad)[0]}")
    roles = {}
    for role in ROLES:
        if role not in roles_raw and not defaults.get("model"):
            continue
        merged, where = {**defaults, **(roles_raw.get(role) or {})}, f"roles.{role}"
        for k in merged:
            if k.lower() in _SECRET_KEYS:
                raise InputError("secrets are not accepted in config files; set the API key in the environment "
                                 "(e.g. OPENAI_API_KEY) or name the variable with api_key_env", path=path,
                                 field=f"{where}.{k}")
        model = merged.get("model")
        if not isinstance(model, str) or not model.strip():
            raise InputError("needs a model spec (e.g. openai:gpt-4o-mini, gemini:gemini-2.0-flash, hf:/path)",
                             path=path, field=f"{where}.model")
        try:
            gen = {k: read(merged[k]) for k, read in GEN_KEYS.items() if merged.get(k) is not None}
        except (TypeError, ValueError) as e:
            raise InputError(f"bad generation option ({e})", path=path, field=where) from None
        roles[role] = RoleConfig(model=model.strip(), **gen,
                                 options={k: v for k, v in merged.items() if k not in (*GEN_KEYS, "model")})
    settings_raw = dict(raw.get("settings") or {})
    for old, new in (("lambda", "lam"), ("max_statements", "xr_max_statements")):  # max_statements: the
        if old in settings_raw:  # profile setting's older YAML name
            settings_raw[new] = settings_raw.pop(old)
    profile = raw.get("profile", settings_raw.pop("profile", None))
    overrides = {k: settings_raw.pop(k) for k in list(settings_raw) if k in SETTINGS}
    unknown_settings = sorted(set(settings_raw) - {f.name for f in fields(XRSettings)})
    if unknown_settings:
        raise InputError("unknown setting", path=path, field=f"settings.{unknown_settings[0]}")
    settings = XRSettings(**settings_raw)
    prompts = raw.get("official_prompts")  # relative: to the YAML's folder
    prompts = None if prompts is None else str(path.parent / Path(prompts).expanduser())
    config = XRConfig(roles=roles, encoder=raw.get("encoder"), text_encoder=raw.get("text_encoder"),
                      settings=settings, profile=profile, overrides=overrides, official_prompts=prompts)
    try:
        config.resolve_settings()  # a bad profile or setting value fails here, naming it
    except ConfigError as e:
        raise InputError(str(e), path=path, field="profile" if "profile" in str(e) else "settings") from None
    return config
