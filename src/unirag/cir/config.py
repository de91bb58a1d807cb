"""X^R configuration: which model plays each agent role, and the retrieval settings.

YAML layout (see ``examples/xr_agents.yaml``)::

    defaults: {model: "openai:gpt-4o-mini", base_url: "http://127.0.0.1:8000/v1", temperature: 0}
    roles:
      caption: {model: "hf:/models/llava", max_tokens: 120}
      text_imagination: {}          # inherits defaults
    encoder: null                   # cross-modal encoder spec (null = offline default)
    text_encoder: null              # caption-caption similarity: null = the CLIP encoder above
                                    # (MiniLM only with the offline default encoder)
    settings: {lambda: 0.5, k_prime: 100, concurrency: 4}

Defaults follow the official X^R code where the paper is silent (01yzzyu/xr.github.io,
``XR/xr.py``: ``--top_k`` 100 = k', ``--rrf_k`` 60; ``XR/utils/inference_entrypoint_ray.py``
``clip_extact_feature_ray`` embeds images and captions with one CLIP model).

Generation options (max_tokens, temperature, seed) go to every call; any other key of a role
(base_url, api_key_env, device, ...) is passed to the generator factory. API keys are never
accepted in the file: backends read them from the environment.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from unirag.cir.agents import ROLES
from unirag.cir.fusion import NORMS
from unirag.data.text import read_text
from unirag.errors import ConfigError, InputError
from unirag.generators.options import identity_config

GEN_KEYS = ("max_tokens", "temperature", "seed")
_SECRET_KEYS = ("api_key", "key", "token", "secret", "password")


@dataclass
class RoleConfig:
    model: str
    max_tokens: int = 400
    temperature: float = 0.0
    seed: int | None = None
    options: dict[str, Any] = field(default_factory=dict)  # passed to load_text_generator

    def generation_options(self):
        from unirag.generators.base import GenerationOptions

        return GenerationOptions(max_tokens=self.max_tokens, temperature=self.temperature, seed=self.seed)

    def fingerprint(self) -> str:
        """Identifies what the replies depend on (model, options), for the call cache keys."""
        opts = identity_config(self.options)
        blob = json.dumps({"model": self.model, "gen": [self.max_tokens, self.temperature, self.seed],
                           "options": opts}, sort_keys=True, default=str)
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
    max_statements: int = 5

    def check(self) -> None:
        if not 0.0 <= self.lam <= 1.0:
            raise ConfigError(f"lambda must lie in [0, 1], got {self.lam}")
        for name in ("k_prime", "k", "rrf_k", "concurrency", "json_attempts", "max_statements"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.norm not in NORMS:
            raise ConfigError(f"norm must be one of {NORMS}, got {self.norm!r}")


@dataclass
class XRConfig:
    roles: dict[str, RoleConfig] = field(default_factory=dict)
    encoder: str | None = None
    text_encoder: str | None = None
    settings: XRSettings = field(default_factory=XRSettings)

    @property
    def has_agents(self) -> bool:
        return bool(self.roles)

    def manifest(self) -> dict[str, Any]:
        """What a run records about its configuration (no secrets: they are never in the config)."""
        return {"roles": {r: {"model": c.model, "max_tokens": c.max_tokens, "temperature": c.temperature,
                              "seed": c.seed, "options": c.options} for r, c in self.roles.items()},
                "encoder": self.encoder, "text_encoder": self.text_encoder, "settings": vars(self.settings)}


def _role_config(raw: dict[str, Any], path: Path, where: str) -> RoleConfig:
    for k in raw:
        if k.lower() in _SECRET_KEYS:
            raise InputError("secrets are not accepted in config files; set the API key in the environment "
                             "(e.g. OPENAI_API_KEY) or name the variable with api_key_env", path=path,
                             field=f"{where}.{k}")
    model = raw.get("model")
    if not isinstance(model, str) or not model.strip():
        raise InputError("needs a model spec (e.g. openai:gpt-4o-mini, gemini:gemini-2.0-flash, hf:/path)",
                         path=path, field=f"{where}.model")
    gen = {k: raw[k] for k in GEN_KEYS if k in raw and raw[k] is not None}
    opts = {k: v for k, v in raw.items() if k not in (*GEN_KEYS, "model")}
    try:
        return RoleConfig(model=model.strip(), options=opts,
                          max_tokens=int(gen.get("max_tokens", 400)),
                          temperature=float(gen.get("temperature", 0.0)),
                          seed=None if gen.get("seed") is None else int(gen["seed"]))
    except (TypeError, ValueError) as e:
        raise InputError(f"bad generation option ({e})", path=path, field=where) from None


def load_config(path: str | Path | None) -> XRConfig:
    """Parse the agents YAML; ``None`` gives the offline configuration (no agents)."""
    if path is None:
        return XRConfig()
    import yaml

    path = Path(path)
    if not path.exists():
        raise InputError("agents config not found", path=path)
    try:
        raw = yaml.safe_load(read_text(path)) or {}
    except yaml.YAMLError as e:
        raise InputError(f"malformed YAML ({e})", path=path) from None
    if not isinstance(raw, dict):
        raise InputError("expected a mapping at the top level", path=path)
    unknown = set(raw) - {"defaults", "roles", "encoder", "text_encoder", "settings"}
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
        merged = {**defaults, **(roles_raw.get(role) or {})}
        roles[role] = _role_config(merged, path, f"roles.{role}")
    settings_raw = dict(raw.get("settings") or {})
    if "lambda" in settings_raw:
        settings_raw["lam"] = settings_raw.pop("lambda")
    known = {f.name for f in fields(XRSettings)}
    if set(settings_raw) - known:
        bad_key = sorted(set(settings_raw) - known)[0]
        raise InputError("unknown setting", path=path, field=f"settings.{bad_key}")
    settings = XRSettings(**settings_raw)
    settings.check()
    return XRConfig(roles=roles, encoder=raw.get("encoder"), text_encoder=raw.get("text_encoder"),
                    settings=settings)
