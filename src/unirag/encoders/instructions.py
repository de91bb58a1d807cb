"""M-BEIR query instructions, prepended to queries exactly as UniIR does.

UniIR's retrievers are instruction-tuned: at training and evaluation (``embed.yaml``:
``enable_query_instruct: true``) a query's text becomes ``format_string(f"{instruction} {query_txt}")``,
the instruction one of the prompts ``instructions/query_instructions.tsv`` lists for the query's dataset
and modalities (so an image-only query becomes image+text). UniIR draws the prompt with
``random.choice``; unirag seeds the draw with the query id, so a query always gets the same instruction,
in any order, batch or resumed run.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from pathlib import Path

from unirag.data.records import Modality, Query
from unirag.data.text import read_text
from unirag.errors import InputError, existing_path

#: Where M-BEIR keeps the file, relative to the M-BEIR root.
MBEIR_INSTRUCTIONS = Path("instructions") / "query_instructions.tsv"

#: M-BEIR dataset ids (UniIR ``data/preprocessing/utils.py``) and the names unirag's importers use.
DATASET_IDS = {"visualnews": "0", "fashion200k": "1", "webqa": "2", "edis": "3", "nights": "4", "oven": "5",
               "infoseek": "6", "fashioniq": "7", "cirr": "8", "mscoco": "9", "coco": "9"}

#: M-BEIR task id -> (query modality, candidate modality).
TASKS = {0: ("text", "image"), 1: ("text", "text"), 2: ("text", "image,text"), 3: ("image", "text"),
         4: ("image", "image"), 6: ("image,text", "text"), 7: ("image,text", "image"),
         8: ("image,text", "image,text")}


def format_string(s: str | None) -> str:
    """UniIR's text normalisation: strip, drop carriage returns and surrounding double quotes,
    capitalise the first character, end with a period unless it ends with . ? or !."""
    s = (s or "").replace("\r", "").strip().strip('"')
    if s:
        s = s[0].upper() + s[1:]
        if s[-1] not in ".?!":
            s += "."
    return s


def dataset_key(qid: str) -> str | None:
    """The M-BEIR dataset id of a query id: ``"9:1"`` -> ``"9"``, ``"coco:q3:..."`` -> ``"9"``."""
    prefix = str(qid).split(":", 1)[0].strip().lower()
    if prefix.isdigit():
        return prefix
    return DATASET_IDS.get(prefix)


@dataclass
class QueryInstructions:
    """The prompts of a ``query_instructions.tsv``, keyed by (dataset id, query modality, candidate modality)."""

    prompts: dict[tuple[str, str, str], list[str]] = field(default_factory=dict)
    source: str = ""

    @classmethod
    def read(cls, path: str | Path) -> QueryInstructions:
        """Parse a file in M-BEIR's layout (tabs, a header, then query and candidate modality, dataset name and
        id, prompts; empty prompts ignored, as UniIR ``MBEIRDatasetBase._load_query_instructions``); a
        malformed row raises InputError naming the file and line."""
        path = existing_path(path, "query instructions file")
        table: dict[tuple[str, str, str], list[str]] = {}
        lines = read_text(path).splitlines()
        for lineno, line in enumerate(lines[1:], start=2):  # the first line is the header
            if not line.strip():
                continue
            parts = line.strip().split("\t")
            if len(parts) < 5:
                raise InputError(f"expected query_modality, cand_modality, dataset_name, dataset_id and at least one "
                                 f"prompt separated by tabs; got {len(parts)} column(s)", path=path, line=lineno)
            qmod, cmod, name, did = (p.strip() for p in parts[:4])
            for mod, col in ((qmod, "query_modality"), (cmod, "cand_modality")):
                try:
                    Modality.parse(mod)
                except ValueError:
                    raise InputError(f"unknown modality {mod!r}", path=path, line=lineno, field=col) from None
            prompts = [p for p in parts[4:] if p]
            if not prompts:
                raise InputError("no prompt on this row", path=path, line=lineno)
            for key in {did, DATASET_IDS.get(name.lower(), did)}:
                table[(key, Modality.parse(qmod).value, Modality.parse(cmod).value)] = prompts
        if not table:
            raise InputError("no instruction rows (the first line is the header)", path=path)
        return cls(table, str(path))

    def candidates_for(self, query: Query) -> list[str] | None:
        """The prompts M-BEIR lists for this query's dataset and task, or None when it names neither."""
        did = dataset_key(query.qid)
        if did is None or query.task_id not in TASKS:
            return None
        return self.prompts.get((did, *TASKS[query.task_id]))  # TASKS holds the modalities' canonical values

    def instruction_for(self, query: Query) -> str | None:
        """One prompt for ``query`` (drawn with a generator seeded by its qid), or None if none applies."""
        prompts = self.candidates_for(query)
        if not prompts:
            return None
        seed = int.from_bytes(hashlib.sha256(query.qid.encode()).digest()[:8], "big")
        return format_string(random.Random(seed).choice(prompts))

    def apply(self, query: Query) -> Query | None:
        """The query with its instruction prepended (an image query becomes image+text), or None."""
        prompt = self.instruction_for(query)
        if prompt is None:
            return None
        from dataclasses import replace

        text = prepend_instruction(prompt, query.txt)
        modality = Modality.IMAGE_TEXT if query.modality.has_image else Modality.TEXT
        return replace(query, txt=text, modality=modality)


def prepend_instruction(prompt: str, text: str | None) -> str:
    """UniIR's instructed query text: ``format_string(f"{prompt} {text}")`` with the prompt normalised."""
    return format_string(f"{format_string(prompt)} {text or ''}")


def find_instructions(start: str | Path) -> Path | None:
    """``instructions/query_instructions.tsv`` in ``start``'s folder or any folder above it (M-BEIR keeps
    queries in ``<root>/query/<split>/`` and the instructions in ``<root>/instructions/``)."""
    p = Path(start).resolve()
    for folder in [p, *p.parents] if p.is_dir() else list(p.parents):
        candidate = folder / MBEIR_INSTRUCTIONS
        if candidate.is_file():
            return candidate
    return None
