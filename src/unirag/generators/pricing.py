"""API cost accounting: usage x price, per call and per run.

Caption defaults are the paper's Table 8 (USD per 1000 tokens; Gemini images per image). The table
lists GPT-4o image input per 1000 *tokens*; OpenAI reports one prompt-token total, so the GPT-4o
backend splits it with OpenAI's published image-token formula. The paper reports no image-API cost
(its image generators were local), so the image defaults are the providers' published rates at the
time of writing: gpt-image-1 ($5 / $10 / $40 per 1M text-in / image-in / image-out tokens) and
gemini-2.5-flash-image ($0.30 per 1M input tokens, $30 per 1M output tokens). Prices change:
override them with a JSON or YAML file (``--prices``) or a mapping from a model name to any of the fields of
:class:`Price`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from unirag.errors import InputError, existing_path
from unirag.generators.base import Usage


@dataclass(frozen=True)
class Price:
    input_text_per_1k: float = 0.0
    input_image_per_1k_tokens: float = 0.0
    input_image_each: float = 0.0
    output_per_1k: float = 0.0

    def cost(self, usage: Usage) -> float:
        text_tokens = usage.input_text_tokens or max(0, usage.input_tokens - usage.input_image_tokens)
        return (text_tokens / 1000 * self.input_text_per_1k
                + usage.input_image_tokens / 1000 * self.input_image_per_1k_tokens
                + usage.input_images * self.input_image_each
                + usage.output_tokens / 1000 * self.output_per_1k)


_GEMINI_PRO = Price(input_text_per_1k=0.000125, input_image_each=0.0025, output_per_1k=0.000375)
DEFAULT_PRICES: dict[str, Price] = {
    "gpt-4o": Price(input_text_per_1k=0.005, input_image_per_1k_tokens=0.015, output_per_1k=0.005),
    "gemini-pro": _GEMINI_PRO,
    "gemini-1.0-pro": _GEMINI_PRO,
    "gemini-1.0-pro-vision": _GEMINI_PRO,
    "gemini-1.5-pro": _GEMINI_PRO,
}
#: Image API defaults (the module docstring), used for image generators only.
IMAGE_PRICES: dict[str, Price] = {
    "gpt-image-1": Price(input_text_per_1k=0.005, input_image_per_1k_tokens=0.010, output_per_1k=0.040),
    "gemini-2.5-flash-image": Price(input_text_per_1k=0.0003, output_per_1k=0.030),
}
FREE_BACKENDS = ("hf", "retrieval")
_VERSION_SUFFIX = re.compile(r"^-(\d|latest|preview)")


def price_for(spec: str, prices: str | Path | Mapping[str, Any] | None = None, *, image: bool = False,
              local: bool = False) -> Price | None:
    """The price of a generator spec; local models and backends are free; None when the model is not in
    the table: the caption defaults (with ``image``, the image defaults too) updated with ``prices``, a
    JSON/YAML file or a mapping ``{model: {input_text_per_1k: ..., ...}}`` whose entries win.

    A model matches a table entry exactly or with a version suffix (``gpt-4o-2024-05-13`` is
    ``gpt-4o``; ``gpt-4o-mini`` is not).
    """
    prefix, _, model = spec.partition(":")
    if local or prefix in FREE_BACKENDS:
        return Price()
    table = {**DEFAULT_PRICES, **(IMAGE_PRICES if image else {}), **read_prices(prices)}
    model = model.rsplit("/", 1)[-1]
    if model in table:
        return table[model]
    best = max((name for name in table if model.startswith(name) and _VERSION_SUFFIX.match(model[len(name):])),
               key=len, default=None)
    return table[best] if best is not None else None


def read_prices(prices: str | Path | Mapping[str, Any] | None) -> dict[str, Price]:
    """The entries of a JSON/YAML prices file or mapping ``{model: {input_text_per_1k: ..., ...}}``."""
    if prices is None:
        return {}
    where = "prices"
    if not isinstance(prices, Mapping):
        path = existing_path(prices, "prices file")
        where = str(path)
        text = path.read_text(encoding="utf-8")
        try:
            if path.suffix.lower() in (".yaml", ".yml"):
                import yaml

                prices = yaml.safe_load(text)
            else:
                prices = json.loads(text)
        except Exception as e:  # noqa: BLE001 - json and yaml raise different types
            raise InputError(f"cannot parse prices ({e})", path=path) from None
        if not isinstance(prices, dict):
            raise InputError("expected a mapping model -> prices", path=path)
    allowed = {f.name for f in fields(Price)}
    table = {}
    for model, values in prices.items():
        if not isinstance(values, dict):
            raise InputError(f"prices for {model!r} must be a mapping", path=where, field=str(model))
        bad = set(values) - allowed
        if bad:
            raise InputError(f"unknown price field(s) {', '.join(sorted(bad))}; allowed: {', '.join(sorted(allowed))}",
                             path=where, field=str(model))
        try:
            table[str(model)] = Price(**{k: float(v) for k, v in values.items()})
        except (TypeError, ValueError):
            raise InputError("prices must be numbers", path=where, field=str(model)) from None
    return table


def cost_usd(usage: Usage, price: Price | None) -> float | None:
    return round(price.cost(usage), 8) if price is not None else None
