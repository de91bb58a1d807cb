"""Default prices of the image APIs, in the shared :class:`~unirag.generators.pricing.Price` shape.

The paper reports no image-API cost (its generators were local), so these are the providers'
published rates at the time of writing, in USD per 1000 tokens: gpt-image-1 ($5 / $10 / $40 per 1M
text-in / image-in / image-out tokens) and gemini-2.5-flash-image ($0.30 per 1M input tokens,
$30 per 1M output tokens). Prices change: ``--prices FILE`` overrides any entry.
"""

from __future__ import annotations

from pathlib import Path

from unirag.generators.pricing import DEFAULT_PRICES, Price, load_prices, price_for

IMAGE_PRICES: dict[str, Price] = {
    "gpt-image-1": Price(input_text_per_1k=0.005, input_image_per_1k_tokens=0.010, output_per_1k=0.040),
    "gemini-2.5-flash-image": Price(input_text_per_1k=0.0003, output_per_1k=0.030),
}


def image_price(spec: str, local: bool, prices_path: str | Path | None = None) -> Price | None:
    """The price of one image backend: local models are free; None when the model has no known price."""
    if local:
        return Price()
    table = {**DEFAULT_PRICES, **IMAGE_PRICES}
    if prices_path is not None:
        table.update(load_prices(prices_path))  # the file's entries win over every default
    return price_for(spec, table)
