"""What the docs tests read out of the Markdown pages: fenced blocks, ``unirag`` command lines, option tables.

The rules a page follows (docs/development.md, "Docs"):

* a ```` ```python ```` fence is run by the suite; a block that must not run is fenced as ``text`` (or
  ``bash`` for shell commands);
* every ``unirag ...`` command line in a shell block (or an inline code span starting ``unirag ``)
  uses options its command has;
* a command page's "Options" section has one table per command, under a heading that names it
  (```` ### `unirag index build` ````; several commands with the same options share one heading).
"""

from __future__ import annotations

import re
import shlex
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"

# A fence opens a line (possibly indented, inside a list or an admonition) and closes at the same indent.
_FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.S | re.M)
_INLINE = re.compile(r"(?<!`)`(unirag [^`]+)`(?!`)")


def pages() -> list[Path]:
    """README.md and every Markdown page of the docs site."""
    return [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]


def page_id(path: Path) -> str:
    return str(path.relative_to(REPO))


def fenced_blocks(markdown: str) -> list[tuple[str, str]]:
    """``(language, dedented body)`` of every fenced block, in page order."""
    out = []
    for m in _FENCE.finditer(markdown):
        lang = m.group("info").strip().split(" ")[0].lower()
        body = textwrap.dedent("".join(line[len(m.group("indent")):] if line.startswith(m.group("indent")) else line
                                       for line in m.group("body").splitlines(keepends=True)))
        out.append((lang, body))
    return out


def python_blocks(markdown: str) -> list[str]:
    return [body for lang, body in fenced_blocks(markdown) if lang == "python"]


def _prose(markdown: str) -> str:
    """The page without its fenced blocks."""
    return _FENCE.sub("", markdown)


def command_lines(markdown: str) -> list[list[str]]:
    """Every ``unirag ...`` command as tokens (after ``unirag``), from shell blocks and inline code.

    Continuation lines are joined, comments dropped, and the ``[`` ``]`` that mark optional parts
    stripped, so ``[--k-prime 100 --lambda 0.5]`` reads as two options.
    """
    commands: list[str] = []
    for lang, body in fenced_blocks(markdown):
        if lang not in ("bash", "sh", "shell", "console"):
            continue
        for line in body.replace("\\\n", " ").splitlines():
            line = line.strip().removeprefix("$ ")
            if line.startswith("unirag "):
                commands.append(line)
    commands += _INLINE.findall(_prose(markdown))
    out = []
    for cmd in commands:
        tokens = shlex.split(cmd, comments=True)[1:]
        out.append([t.strip("[]") for t in tokens if t.strip("[]")])
    return out


def option_tables(markdown: str) -> dict[str, list[str]]:
    """``"index build" -> ["--pool", ...]`` (and arguments as their upper-case names) per table of the
    page's "## Options" section."""
    if "\n## Options\n" not in markdown:
        return {}
    section = markdown.split("\n## Options\n", 1)[1].split("\n## ", 1)[0]
    tables: dict[str, list[str]] = {}
    current: list[str] = []
    for line in section.splitlines():
        if line.startswith("### "):
            current = re.findall(r"`unirag ([^`]+)`", line)
            for name in current:
                tables[name] = []
        elif line.startswith("| `") and current:
            first = line.split("|")[1]
            names = re.findall(r"`(--[\w-]+|[A-Z][A-Z_]*(?:\.\.\.)?)`", first)
            for name in current:
                tables[name] += names
    return tables
