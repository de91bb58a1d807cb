"""Prompt template files: wording lives in ``prompts/templates/*.txt``, never in code.

A template file is a set of named sections::

    # comment lines before the first section are ignored
    ### system
    You are ...
    ### few_shot
    I have provided you {num} image(s) ...

Sections are filled with :meth:`str.format` (values are inserted verbatim, so braces inside a
caption are safe). Run manifests record each template's file name and SHA-256, so a result can
always be traced to the exact wording that produced it.
"""

from __future__ import annotations

import hashlib
import re
import string
from dataclasses import dataclass
from pathlib import Path

from unirag.data.text import read_text
from unirag.errors import ConfigError

TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"
_SECTION = re.compile(r"^###\s+([A-Za-z0-9_]+)\s*$")


@dataclass(frozen=True)
class PromptTemplate:
    name: str
    path: Path
    sections: dict[str, str]
    sha256: str

    def text(self, section: str) -> str:
        if section not in self.sections:
            raise ConfigError(f"{self.path}: template has no section '### {section}'")
        return self.sections[section]

    def fill(self, section: str, **values: object) -> str:
        """Format one section; a placeholder without a value is a template error naming the file."""
        text = self.text(section)
        needed = {f for _, f, _, _ in string.Formatter().parse(text) if f}
        missing = needed - set(values)
        if missing:
            raise ConfigError(f"{self.path}: section '{section}' uses unknown placeholder(s) "
                              f"{', '.join(sorted(missing))}; available: {', '.join(sorted(values))}")
        return text.format(**values)

    def manifest_entry(self) -> dict[str, str]:
        return {"name": self.name, "file": self.path.name, "path": str(self.path), "sha256": self.sha256}


def load_template(name: str, directory: str | Path | None = None,
                  required: tuple[str, ...] = ()) -> PromptTemplate:
    """Load ``<directory>/<name>.txt`` (default: the packaged templates); check required sections."""
    path = Path(directory or TEMPLATES_DIR) / f"{name}.txt"
    if not path.exists():
        have = sorted(p.stem for p in path.parent.glob("*.txt")) if path.parent.is_dir() else []
        raise ConfigError(f"prompt template not found: {path}" + (f" (available: {', '.join(have)})" if have else ""))
    text = read_text(path)
    sections: dict[str, list[str]] = {}
    current: str | None = None
    for line in text.splitlines():
        m = _SECTION.match(line)
        if m:
            current = m.group(1)
            if current in sections:
                raise ConfigError(f"{path}: section '### {current}' appears twice")
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
    if not sections:
        raise ConfigError(f"{path}: no '### section' headers found; not a prompt template")
    missing = [s for s in required if s not in sections]
    if missing:
        raise ConfigError(f"{path}: missing section(s) {', '.join('### ' + s for s in missing)}")
    clean = {k: "\n".join(v).strip("\n") for k, v in sections.items()}
    return PromptTemplate(name=name, path=path, sections=clean,
                          sha256=hashlib.sha256(text.encode("utf-8")).hexdigest())
