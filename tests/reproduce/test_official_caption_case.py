"""Caption case under the official profile: the official UniRAG code lower-cases GPT replies only
(castorini/UniRAG@294f843 src/unirag/caption_generation_inference.py:179-183, infer_gpt:
``response.choices[0].message.content.lower()``; :85 infer_gemini keeps ``response.text``; infer_llava
keeps the decoded text)."""

from __future__ import annotations

from PIL import Image

from unirag.generators.base import Generation, TextGenerator
from unirag.pipelines.captioner import Captioner


class _Fixed(TextGenerator):
    """Answers every call with ``text``; ``family`` is its prompt-template family."""

    def __init__(self, text: str, family: str) -> None:
        self.text, self.template_family, self.spec = text, family, f"python:fixed-{family}"

    def generate(self, messages, options=None):
        return Generation(text=self.text)


def _caption(tmp_path, family, **kw):
    img = tmp_path / "x.png"
    Image.new("RGB", (8, 8), (200, 0, 0)).save(img)
    return Captioner(_Fixed("  A Red Square On A Mat ", family), **kw).caption(img, mode="zero-shot").text


def test_official_profile_lowercases_gpt4o_captions_only(tmp_path):
    assert _caption(tmp_path, "gpt4o", profile="official") == "a red square on a mat"
    assert _caption(tmp_path, "gemini", profile="official") == "A Red Square On A Mat"
    assert _caption(tmp_path, "llava", profile="official") == "A Red Square On A Mat"


def test_default_profile_keeps_the_case_and_all_lowercases_every_family(tmp_path):
    assert _caption(tmp_path, "gpt4o") == "A Red Square On A Mat"
    assert _caption(tmp_path, "gemini", profile="default") == "A Red Square On A Mat"
    from unirag.profiles import resolve

    assert _caption(tmp_path, "llava", profile=resolve("default", caption_lowercase="all")) == "a red square on a mat"
    assert _caption(tmp_path, "gpt4o", profile=resolve("official", caption_lowercase="none")) == "A Red Square On A Mat"
