"""The README stays short and points into the docs; the docs pages' non-Python blocks and the API
reference agree with what they describe."""

from __future__ import annotations

import importlib.util
import re

import yaml
from docs_markdown import DOCS, REPO, fenced_blocks, page_id, pages

import unirag

_spec = importlib.util.spec_from_file_location("docs_hooks", REPO / "scripts" / "docs_hooks.py")
docs_hooks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(docs_hooks)


def test_readme_is_short_with_the_two_quick_start_commands_and_links_into_the_docs():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 150
    quick = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    (block,) = [body for lang, body in fenced_blocks(quick) if lang == "bash"]
    assert [line.split("#")[0].strip() for line in block.strip().splitlines()] == ["make demo", "make test"]
    links = set(re.findall(r"\]\((docs/[^)#]+)", readme))
    assert all((REPO / link).is_file() for link in links)
    # every command page and the reference are one click away
    assert {f"docs/{p.relative_to(DOCS)}" for p in (DOCS / "commands").glob("*.md")} | {"docs/reference.md"} <= links
    assert "arXiv:2405.10311" in readme and "arXiv:2503.10166" in readme and "[LICENSE](LICENSE)" in readme


def test_reference_page_lists_exactly_the_public_names():
    page = (DOCS / "reference.md").read_text(encoding="utf-8")
    assert docs_hooks.reference_problems(unirag, page) == []
    assert sorted(docs_hooks.reference_entries(page)) == sorted(n for n in unirag.__all__ if n != "__version__")
    # what the build reports when a name is left out or made up
    broken = page.replace("::: unirag.XR\n", "::: unirag.Nope\n")
    assert docs_hooks.reference_problems(unirag, broken) == ["XR is public but not in reference.md",
                                                             "Nope is in reference.md but not in unirag.__all__"]


def test_yaml_blocks_parse_and_the_grid_example_is_the_example_file():
    for page in pages():
        for lang, body in fenced_blocks(page.read_text(encoding="utf-8")):
            if lang == "yaml":
                assert isinstance(yaml.safe_load(body), dict), page_id(page)
    (grid,) = [body for lang, body in fenced_blocks((DOCS / "commands" / "run.md").read_text(encoding="utf-8"))
               if lang == "yaml"]
    example = yaml.safe_load((REPO / "examples" / "table3_grid.yaml").read_text(encoding="utf-8"))
    assert yaml.safe_load(grid) == example


def test_sphinx_roles_render_as_code():
    html = ':meth:<code>search</code> and :class:<code>~unirag.index.store.VectorIndex</code> :class:<code>unirag.Pool</code>'
    assert docs_hooks.on_page_content(html) == "<code>search</code> and <code>VectorIndex</code> <code>unirag.Pool</code>"
