"""Image prompt templates: packaged files with the sections each backend needs, rendered in example order."""

from __future__ import annotations

import pytest

from unirag.generators.images.base import (
    ALL,
    FEW_SHOT_API,
    FEW_SHOT_OMNIGEN,
    image_template,
    render_listed,
)


@pytest.mark.parametrize("name", ALL)
def test_every_image_template_loads_with_its_sections(name):
    tpl = image_template(name)
    assert tpl.path.name == f"{name}.txt" and len(tpl.sha256) == 64
    assert all(tpl.text(s).strip() for s in tpl.sections)


def test_listed_prompt_numbers_examples_and_keeps_caption_braces_verbatim():
    text = render_listed(FEW_SHOT_API, "A sign reading {hello}.", ["first {x}", "second"])
    assert "[1] first {x}" in text and "[2] second" in text and text.rstrip().endswith("A sign reading {hello}.")
    assert "2 reference image(s)" in text
    assert render_listed(FEW_SHOT_OMNIGEN, "Only the caption.", []) == "Only the caption."

