"""``unirag run GRID --dry-run``: every cell's resolved configuration and what it still lacks.

For each cell: the task, generator, mode, k, retriever and where its examples come from; the
profile and every setting that differs from the ``default`` profile; the data files it reads (each
marked ok or MISSING); the checkpoints it loads (a local folder is checked; a hub id is looked up
in the local Hugging Face cache, and only noted when absent, since it downloads on first use); the
API keys it needs (named, never shown); and the paper's figures. Nothing is loaded or run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unirag.errors import UniragError
from unirag.generators.openai_compat import OFFICIAL_HOST
from unirag.pipelines.experiment_grid import Cell
from unirag.profiles import SETTINGS

#: Generator prefixes whose calls need an API key, and the variables that can hold it.
API_KEYS = {"openai": ("OPENAI_API_KEY",), "openai-image": ("OPENAI_API_KEY",),
            "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"), "gemini-image": ("GEMINI_API_KEY", "GOOGLE_API_KEY")}
#: Generator prefixes whose name is a checkpoint (a local folder or a hub id).
CHECKPOINT_PREFIXES = ("hf", "diffusers", "lavit", "emu2-gen")


@dataclass
class CellPlan:
    cell: Cell
    lines: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    def check(self, label: str, ok: bool, missing: str) -> None:
        """The line ``label: ok``, or ``label: MISSING`` with ``missing`` added to what the cell lacks."""
        self.lines.append(f"  {label}: " + ("ok" if ok else "MISSING"))
        if not ok:
            self.missing.append(missing)


def _checkpoint(plan: CellPlan, kind: str, name: str) -> None:
    """The plan's line (and missing item) for a checkpoint named by a generator or encoder spec."""
    p = Path(name).expanduser()
    if kind.startswith("lavit") or name.startswith(("/", ".", "~")) or p.exists() or name.count("/") != 1:  # a folder
        plan.check(f"{kind} {name}", p.exists(), f"checkpoint {name} ({kind})")
    else:
        home = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface"))
        cached = (Path(os.environ.get("HF_HUB_CACHE", home / "hub")) / ("models--" + name.replace("/", "--"))).is_dir()
        plan.lines.append(f"  {kind} {name}: hub id, " + ("in the local cache" if cached else
                                                           "not cached (downloaded on first use)"))


def _agents(agents: str | None) -> Any:
    """The X^R agents YAML as :func:`unirag.cir.config.load_config` reads it (no roles when it is absent
    or unreadable: its line says MISSING, or the run itself reports the error)."""
    from unirag.cir.config import load_config

    try:
        return load_config(agents if agents and Path(agents).is_file() else None)
    except UniragError:
        return load_config(None)


def _uses(task: str, name: str) -> bool:
    """Whether a kind of cell uses a behaviour setting (those ``unirag caption``, ``unirag
    generate-images`` and ``unirag cir`` take): a cell's plan shows only these."""
    if name.startswith("image_"):  # the image loader: every task reads images
        return True
    if task == "cir":
        return name.startswith("xr_")
    if task == "image":
        return name in ("emu2_sampling", "pair_completion", "example_pairs")
    return name in ("temperature", "caption_prompts", "caption_lowercase", "pair_completion", "example_pairs")


def plan_cell(cell: Cell) -> CellPlan:
    plan = CellPlan(cell)
    add, miss = plan.lines.append, plan.missing.append
    add(f"{cell.name}" + (f"  [paper row {cell.row}]" if cell.row else ""))
    if cell.task == "cir":
        c = cell.cir
        add(f"  task: cir  dataset: {c.get('dataset')}  agents: {c.get('agents') or 'none (embedding baseline)'}"
            f"  encoder: {c.get('encoder') or 'offline'}  k': {c.get('k_prime', 'default')}"
            f"  lambda: {c.get('lam', 'default')}  stage: {c.get('stage') or 'xr'}")
    else:
        retriever = f"{cell.retriever} ({cell.sources.get('retrieval') or cell.sources.get('index')})" \
            if cell.retriever else "-"
        add(f"  task: {cell.task}  generator: {cell.generator}  mode: {cell.mode}  k: {cell.k}  retriever: {retriever}")
    # the profile and the settings this kind of cell uses that differ from the default profile
    settings, task = cell.settings, cell.task
    changed = [f"{n}={settings[n]!s}" for n in sorted(settings)
               if n in SETTINGS and _uses(task, n) and settings[n] != SETTINGS[n].default]
    line = f"  profile: {settings.profile}"
    if changed:
        line += " (" + ", ".join(changed) + ")"
    if settings.overrides:
        line += "; set here: " + ", ".join(settings.overrides)
    bugs = [b for b in settings.official_bugs() if _uses(task, b)]
    if bugs:
        line += "; reproduces official bugs: " + ", ".join(bugs)
    add(line)
    if cell.task != "cir" and cell.mode == "random" and not cell.sources.get("pool"):
        miss("pool (random examples need the pool file)")
    files = [(k, v) for k, v in cell.sources.items() if v and k != "agents"]
    files += [(k, cell.options[k]) for k in ("official_prompts", "lavit_code", "templates_dir", "prices")
              if cell.options.get(k)]
    files += [("agents", cell.sources["agents"])] if cell.sources.get("agents") else []
    for key, value in files:
        for v in value if isinstance(value, list) else [value]:
            plan.check(f"{key}: {v}", Path(v).exists(), f"{key} {v}")
    # Under xr_prompts=official X^R's agents read the official code's prompts from the user's checkout
    # (official_prompts: the grid's options, --option official_prompts=DIR, or the agents YAML); the run
    # stops without one, so the plan names it (the embedding baseline needs none).
    if cell.task == "cir" and cell.sources.get("agents") and cell.settings["xr_prompts"] == "official":
        checkout = cell.options.get("official_prompts") or _agents(cell.sources["agents"]).official_prompts
        if not checkout:
            add("  official_prompts: NOT SET (xr_prompts=official reads the official X^R prompts)")
            miss("the official X^R checkout (01yzzyu/xr.github.io) for xr_prompts=official: official_prompts in the "
                 "grid's options, --option official_prompts=DIR, or official_prompts: in the agents YAML")
        elif "official_prompts" not in cell.options:  # the grid's option is checked with the other files
            plan.check(f"official_prompts: {checkout}", Path(checkout).is_dir(), f"official_prompts {checkout}")
    roles = _agents(cell.sources.get("agents")).roles if cell.task == "cir" else {}
    models = {rc.model: {**cell.options, **rc.options} for rc in reversed(roles.values())}  # a model's first role
    specs = [(cell.generator, cell.options)] if cell.task != "cir" else sorted(models.items())
    for spec, options in specs:
        prefix, _, name = spec.partition(":")
        if prefix in CHECKPOINT_PREFIXES and name:
            _checkpoint(plan, f"{prefix} checkpoint", name)
        # the API key it needs; none for an OpenAI-compatible server at another base URL (base_url option
        # or OPENAI_BASE_URL), which the client calls with a placeholder key, as OpenAIAPI does
        names = API_KEYS.get(prefix.strip())
        base_url = options.get("base_url") or os.environ.get("OPENAI_BASE_URL")
        if not names or (prefix.strip().startswith("openai") and base_url and OFFICIAL_HOST not in str(base_url)):
            continue
        if options.get("api_key_env"):
            names = (str(options["api_key_env"]),)
        present = any(os.environ.get(n) for n in names)
        add(f"  key {' or '.join(names)}: " + ("set" if present else "NOT SET"))
        if not present:
            miss(f"environment variable {' or '.join(names)} (for {spec})")
    encoder = cell.cir.get("encoder") if cell.task == "cir" else None
    if encoder:
        prefix, _, name = str(encoder).partition(":")
        _checkpoint(plan, "encoder", name.split(":", 1)[-1] if prefix == "uniir" else name if prefix == "hf"
                    else str(encoder))
    if cell.paper:
        add("  paper: " + ", ".join(f"{k} {v}" for k, v in cell.paper.items()))
    return plan
