"""Image loading that reports bad files instead of failing late or dropping them silently."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from unirag.errors import InputError


def load_rgb(path: str | Path):
    """Open an image file as RGB. Raises :class:`InputError` naming the file if missing or corrupt."""
    from PIL import Image, UnidentifiedImageError

    path = Path(path)
    if not path.exists():
        raise InputError("image file not found", path=path)
    try:
        with Image.open(path) as im:
            im.load()
            return im.convert("RGB")
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as e:
        raise InputError(f"cannot decode image ({e.__class__.__name__}: {e})", path=path) from None


@dataclass
class BadImageReport:
    """Images that were skipped, with why; printed as a count and the first few paths."""

    bad: list[tuple[str, str]] = field(default_factory=list)

    def add(self, path: str | Path, reason: str) -> None:
        self.bad.append((str(path), reason))

    def __len__(self) -> int:
        return len(self.bad)

    def summary(self, first: int = 5) -> str:
        if not self.bad:
            return "all images readable"
        lines = [f"{len(self.bad)} image(s) missing or unreadable, skipped:"]
        lines += [f"  {p}: {r}" for p, r in self.bad[:first]]
        if len(self.bad) > first:
            lines.append(f"  ... and {len(self.bad) - first} more")
        return "\n".join(lines)


def image_problem(path: str | Path, mode: str = "decode") -> str | None:
    """Why ``path`` cannot be used as an image, or None when it can.

    ``mode``: "decode" reads all pixel data (JPEGs at reduced DCT scale, which still walks the whole
    stream), so truncated files are caught - PIL's ``verify()`` alone passes a truncated JPEG;
    "verify" checks headers/structure only (faster); "exists" only checks the file is there.
    """
    from PIL import Image

    if mode not in ("decode", "verify", "exists"):
        raise ValueError(f"unknown image check mode {mode!r}; expected decode, verify or exists")
    p = Path(path)
    if not p.is_file():
        return "not found"
    if mode == "exists":
        return None
    try:
        with Image.open(p) as im:
            if mode == "verify":
                im.verify()
            else:
                im.draft("RGB", (64, 64))
                im.load()
    except Exception as e:  # noqa: BLE001 - PIL raises many types for corrupt files
        return f"corrupt ({e.__class__.__name__}: {e})"
    return None


def check_images(paths: Iterable[str | Path], report: BadImageReport | None = None,
                 *, mode: str = "decode") -> BadImageReport:
    """Verify that each file exists and decodes (header + data; see :func:`image_problem`)."""
    report = report or BadImageReport()
    for p in paths:
        reason = image_problem(p, mode)
        if reason is not None:
            report.add(p, reason)
    return report
