"""``python:MODULE:FACTORY`` generators: the user's object's own hooks are used where it has them, the
base class's defaults where it has not (generators/plugin.py)."""

from __future__ import annotations

import sys
import types

from unirag.generators.base import Generation
from unirag.generators.registry import IMAGE, load_generator
from unirag.messages import Message, TextPart


class _Bare:
    template_family = "llava"

    def generate(self, messages, options=None):
        return Generation(text="one")


class _Full(_Bare):
    batch_size = 3

    def generate_batch(self, batch, options=None):
        return [Generation(text="batched")] * len(batch)

    def sent_prompt(self, messages, options=None):
        return "AS SENT"


class _Image:
    local = 0
    max_examples = 2

    def generate(self, request):
        from PIL import Image

        return Image.new("RGB", (2, 2))


def _module(monkeypatch):
    mod = types.ModuleType("plugin_under_test")
    mod.bare, mod.full, mod.image = _Bare, _Full, _Image
    monkeypatch.setitem(sys.modules, "plugin_under_test", mod)


def test_caption_plugin_hooks_and_defaults(monkeypatch):
    _module(monkeypatch)
    msg = [Message("user", [TextPart("hi")])]
    bare = load_generator("python:plugin_under_test:bare")
    assert (bare.template_family, bare.image_mode, bare.batch_size) == ("llava", "multi-image", 1)
    assert [g.text for g in bare.generate_batch([msg, msg])] == ["one", "one"]  # the default: one call each
    from unirag import Captioner

    assert Captioner(bare).batches and Captioner(load_generator("python:plugin_under_test:full")).batches
    assert "hi" in bare.sent_prompt(msg)  # the rendered messages
    full = load_generator("python:plugin_under_test:full")
    assert full.batch_size == 3 and [g.text for g in full.generate_batch([msg, msg])] == ["batched", "batched"]
    assert full.sent_prompt(msg) == "AS SENT"
    assert full.config() == {"spec": "python:plugin_under_test:full", "backend": "python"}


def test_image_plugin_hooks_and_defaults(monkeypatch):
    _module(monkeypatch)
    gen = load_generator("python:plugin_under_test:image", IMAGE)
    assert (gen.local, gen.max_examples, gen.min_examples, gen.templates, gen.identity()) == (False, 2, 0, (), {})
    from unirag.generators.images.base import ImageRequest

    out = gen.generate(ImageRequest(qid="q", caption="c"))
    assert out.image.size == (2, 2) and gen.prompt_text(ImageRequest(qid="q", caption="c")) == "c"
