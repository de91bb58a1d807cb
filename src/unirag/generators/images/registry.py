"""Image generators by spec string: ``PREFIX:NAME``.

``diffusers:<hub id or local dir>``   a local diffusers pipeline (text-only -> zero-shot; OmniGen-style
                                       pipelines with reference images -> few-shot too)
``openai-image:gpt-image-1``          OpenAI images API (few-shot through images.edit)
``gemini-image:<model>``              Gemini image generation (few-shot via interleaved images)
``retrieval:top1``                    the top-1 retrieved example's image (offline baseline)
``lavit:<LaVIT checkpoint dir>``      LaVIT through its own ``build_model`` / ``multimodal_synthesis`` (lavit.py)
``emu2-gen:<Emu2-Gen dir or hub id>`` Emu2-Gen through diffusers' custom pipeline ``pipeline_emu2_gen`` (emu2.py)
``python:pkg.module:factory``         whatever image generator ``factory(**options)`` returns (plugin.py)

Options are keyword arguments; each backend takes those its constructor declares and ignores the
rest, so one CLI option set serves every backend. Backends are imported only when selected.
"""

from __future__ import annotations

from typing import Any

from unirag.generators.images.base import ImageGenerator
from unirag.generators.spec import BackendTable, build_backend, parse_backend_spec

# prefix -> ("module:class", what NAME means)
BACKENDS: BackendTable = {
    "diffusers": ("unirag.generators.images.diffusers_backend:DiffusersImageGenerator",
                  "hub id or local pipeline dir, e.g. diffusers:./my-sd-pipeline"),
    "openai-image": ("unirag.generators.images.openai_images:OpenAIImageGenerator",
                     "model name, e.g. openai-image:gpt-image-1"),
    "gemini-image": ("unirag.generators.images.gemini_images:GeminiImageGenerator",
                     "model name, e.g. gemini-image:gemini-2.5-flash-image"),
    "retrieval": ("unirag.generators.images.retrieval_baseline:RetrievalImageGenerator", "top1"),
    "lavit": ("unirag.generators.images.lavit:LaVITImageGenerator", "LaVIT checkpoint dir, e.g. lavit:./LaVIT-7B-v2"),
    "emu2-gen": ("unirag.generators.images.emu2:Emu2GenImageGenerator",
                 "Emu2-Gen pipeline dir or hub id, e.g. emu2-gen:BAAI/Emu2-Gen"),
    "python": ("unirag.generators.plugin:PluginImageGenerator", "module:factory, e.g. python:mypkg.gen:make"),
}


def parse_image_spec(spec: str) -> tuple[str, str]:
    """``'openai-image:gpt-image-1'`` -> ``('openai-image', 'gpt-image-1')``; unknown prefixes raise."""
    return parse_backend_spec(spec, BACKENDS, "image generator")


def load_image_generator(spec: str, **opts: Any) -> ImageGenerator:
    """Build the image generator a spec names. Options set to None count as not given.

    Options: ``device``, ``dtype`` (diffusers); ``base_url``, ``timeout``, ``quality``,
    ``api_key_env`` (APIs). Keys come from the environment, never from options.
    """
    prefix, name = parse_image_spec(spec)
    return build_backend(prefix, name, BACKENDS, opts)
