"""The official X^R code's per-dataset prompts, read at run time from the user's checkout.

Under ``xr_prompts=official`` the caption, stage-1 reasoner and stage-2 reasoner prompts are the ones
in the official repository (01yzzyu/xr.github.io, ``XR/prompts/<dataset>/``). The paper does not print
them and unirag does not ship them: the user points ``--official-prompts DIR`` (``official_prompts=``
in Python, ``official_prompts:`` in the agents YAML) at their own checkout. DIR may be the checkout
root, its ``XR`` folder, or the ``prompts`` folder itself.

Placeholders are filled the way the official code fills them (01yzzyu/xr.github.io XR/xr.py:253-260
``stage1_reason``: ``[[INSTRUCTION]]``, ``[[REF_IMAGE_DESC]]``; :652-663 ``stage2_verify``: ``[[INSTRUCTION]]``,
``[[ATOMIC_INST]]``, the atomic instructions listed as ``"   (i) kind: content"`` lines after a newline).
"""

from __future__ import annotations

import json
from pathlib import Path

from unirag.errors import ConfigError

#: Files read, by what they are for (XR/xr.py:66-83 load_prompt).
FILES = {"caption": "caption.txt", "reasoner": "prompt1_stage1_reasoner.txt",
         "questions": "prompt2_stage2_reasoner.txt"}
#: Optional files (XR/xr.py:72-76, :86-89: read when present): the cir-v2 reasoner and the caption
#: rewriter, run under xr_stage1_schema=both / xr_rewrite_caption=on when the checkout has them.
OPTIONAL = {"reasoner_v2": "prompt1_stage1_reasoner_v2.txt", "rewriter": "prompt1_stage1_rewriter.txt"}


class OfficialPrompts:
    """The official prompt files of one dataset, checked for completeness when built."""

    def __init__(self, directory: str | Path | None, kind: str, name: str) -> None:
        if directory is not None and (Path(directory).expanduser() / FILES["caption"]).is_file():
            self.dir = Path(directory).expanduser()  # DIR is one dataset's folder (e.g. XR/prompts/CIRR)
            self.dataset_dir = self.dir.name
        else:  # the official prompt folder of a unirag dataset (CIRR, CIRCO, FashionIQ-<category>) in the checkout
            category = (name.split("-") + [""])[1] if kind == "fashioniq" else ""
            self.dataset_dir = {"cirr": "CIRR", "circo": "CIRCO"}.get(kind) or (
                f"FashionIQ-{category}" if category else None)
            if self.dataset_dir is None:
                raise ConfigError(f"the official X^R code has no prompts for the {kind} dataset {name!r}; official "
                                  "prompts exist for CIRR, CIRCO and FashionIQ: point --official-prompts at one "
                                  "dataset's folder (e.g. XR/prompts/CIRR) or use --set xr_prompts=unirag")
            if directory is None:
                raise ConfigError("xr_prompts=official reads the official X^R prompts from your checkout of "
                                  "01yzzyu/xr.github.io: pass --official-prompts DIR (official_prompts= in Python, "
                                  "official_prompts: in the agents YAML), or use --set xr_prompts=unirag")
            root = Path(directory).expanduser()
            if not root.is_dir():
                raise ConfigError(f"--official-prompts {root}: no such directory")
            # the prompts folder: under the checkout, under its XR folder, or the folder itself
            found = next((c for c in (root / "XR" / "prompts", root / "prompts", root)
                          if c.is_dir() and any(p.is_dir() for p in c.iterdir())), None)
            if found is None:
                raise ConfigError(f"--official-prompts {root}: no prompts folder (expected XR/prompts/<dataset>/ "
                                  "inside it)")
            self.dir = found / self.dataset_dir
        self.texts: dict[str, str] = {}
        for what, file in FILES.items():
            path = self.dir / file
            if not path.is_file():
                raise ConfigError(f"official X^R prompt file missing: {path} (the {what} prompt of "
                                  f"{self.dataset_dir}; --official-prompts must point at a checkout of "
                                  "01yzzyu/xr.github.io)")
            self.texts[what] = path.read_text(encoding="utf-8")
        self.optional = {what: (self.dir / file).read_text(encoding="utf-8")
                         for what, file in OPTIONAL.items() if (self.dir / file).is_file()}

    def reasoner(self, instruction: str, reference_caption: str, which: str = "reasoner") -> str:
        """The stage-1 reasoner prompt; ``which="reasoner_v2"``: the optional cir-v2 one, filled alike
        (XR/xr.py:320-326)."""
        return ({**self.texts, **self.optional}[which].replace("[[INSTRUCTION]]", instruction)
                .replace("[[REF_IMAGE_DESC]]", reference_caption.strip()))

    def questions(self, instruction: str, step1: list[list[str]]) -> str:
        listing = "\n" + "".join(f"   ({i}) {kind}: {content}\n" for i, (kind, content) in enumerate(step1, start=1))
        return self.texts["questions"].replace("[[INSTRUCTION]]", instruction).replace("[[ATOMIC_INST]]", listing)

    def rewriter(self, instruction: str, v2: dict) -> str:
        """The optional caption rewriter prompt (XR/xr.py:384-389): ``{user_query}`` = T_m, ``{detail_json_str}``
        = the cir-v2 object as ``json.dumps(v2, ensure_ascii=False, separators=(',', ': '))``."""
        detail = json.dumps(v2, ensure_ascii=False, separators=(",", ": "))
        return self.optional["rewriter"].replace("{user_query}", instruction).replace("{detail_json_str}", detail)

    def manifest(self) -> dict[str, object]:
        return {"dir": str(self.dir), "files": sorted(FILES.values()),
                "optional_present": sorted(OPTIONAL[w] for w in self.optional)}
