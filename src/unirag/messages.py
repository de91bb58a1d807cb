"""A typed content model for interleaved image/text prompts.

Prompt builders produce a list of :class:`Message`; each generator backend renders it to its own
wire format (OpenAI chat parts, Gemini contents, a HF chat template). This keeps prompt wording in
one place (``prompts/``) and wire formats in another (``generators/``).
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from unirag.data.images import exif_orientation, load_rgb, png_bytes

Role = Literal["system", "user", "assistant"]
#: Image formats every API backend takes as they are; others are re-encoded as PNG.
_WEB_MIMES = frozenset({"image/jpeg", "image/png", "image/webp", "image/gif"})


@dataclass(frozen=True)
class TextPart:
    text: str


@dataclass(frozen=True)
class ImagePart:
    """An image given by path (preferred: decoded lazily, once) or as encoded bytes."""

    path: Path | None = None
    data: bytes | None = None
    mime: str = "image/png"
    label: str | None = None  # e.g. the did or "query", for logs and rendered prompts
    #: the file already decoded (by a decode worker, see :func:`unirag.data.loader.ahead`): what :meth:`load`
    #: returns instead of decoding ``path`` again; never part of the prompt's identity
    decoded: Any = field(default=None, compare=False, repr=False)
    #: how :meth:`load` decodes it: the ``image_loading`` setting (see :func:`unirag.data.images.load_rgb`)
    loading: str = field(default="normalised", compare=False, repr=False)

    def __post_init__(self) -> None:
        if (self.path is None) == (self.data is None):
            raise ValueError("ImagePart needs exactly one of path or data")

    @classmethod
    def from_image(cls, image, label: str | None = None, loading: str = "normalised") -> ImagePart:
        """An image part for any image the public API accepts (see :data:`unirag.data.images.ImageLike`).

        Paths stay paths (read when sent); encoded bytes in a web format are sent as they are;
        PIL images and arrays are encoded as lossless PNG.
        """
        if isinstance(image, str | Path):
            return cls(path=Path(image), label=label, loading=loading)
        if isinstance(image, bytes | bytearray | memoryview):
            mime, upright = _sniff(io.BytesIO(bytes(image)))
            if mime in _WEB_MIMES and upright:
                return cls(data=bytes(image), mime=mime, label=label)
        return cls(data=png_bytes(load_rgb(image, loading=loading)), mime="image/png", label=label,
                   loading=loading)

    def load(self):
        """Decode to an RGB PIL image (a copy of :attr:`decoded` where the file was decoded ahead)."""
        if self.path is None:
            return load_rgb(self.data, loading=self.loading)
        return load_rgb(self.path, ahead={str(self.path): self.decoded} if self.decoded is not None else None,
                        loading=self.loading)

    def encoded(self) -> tuple[bytes, str]:
        """Bytes and MIME type for APIs. Files in a web format (read from their bytes, whatever their name)
        are sent as they are; others as PNG."""
        if self.data is not None:
            return self.data, self.mime
        mime, upright = _sniff(self.path)
        if mime in _WEB_MIMES and upright:  # upright as stored: the pixels the index embedded
            return Path(self.path).read_bytes(), mime
        return png_bytes(self.load()), "image/png"

    def data_url(self) -> str:
        data, mime = self.encoded()
        return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def _sniff(source: Any) -> tuple[str | None, bool]:
    """(the MIME type of the image's format, whether it has no EXIF rotation to apply, so its bytes can be
    sent as they are); (None, False) when PIL cannot open it (decoding it later says what is wrong)."""
    from PIL import Image

    try:
        with Image.open(source) as im:
            return Image.MIME.get(im.format or ""), exif_orientation(im) == 1
    except Exception:  # noqa: BLE001
        return None, False


Part = TextPart | ImagePart


@dataclass
class Message:
    role: Role
    parts: list[Part] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.parts if isinstance(p, TextPart))

    @property
    def images(self) -> list[ImagePart]:
        return [p for p in self.parts if isinstance(p, ImagePart)]


def with_decoded(messages: list[Message], ahead: Mapping[str, Any] | None) -> list[Message]:
    """``messages`` with each image part whose file is in ``ahead`` (path -> image decoded ahead)
    carrying that image, so the model's process does not decode it again."""
    if not ahead:
        return messages
    return [Message(m.role, [replace(p, decoded=ahead.get(str(p.path)))
                             if isinstance(p, ImagePart) and p.path is not None else p for p in m.parts])
            for m in messages]


def render_for_log(messages: list[Message]) -> str:
    """Human-readable rendering (images shown as placeholders) for prompt inspection files."""
    def chunk(p: Part) -> str:
        return p.text if isinstance(p, TextPart) else f"<image {p.label or (p.path.name if p.path else 'bytes')}>"

    return "\n\n".join(f"[{m.role}]\n" + "\n".join(map(chunk, m.parts)) for m in messages)
