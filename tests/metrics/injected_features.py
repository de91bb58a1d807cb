"""A small deterministic feature extractor injected into torchmetrics' FID / IS in tests."""

from __future__ import annotations

import torch


class PooledColour(torch.nn.Module):
    """Deterministic small extractor: 4x4 average colour grid -> fixed random projection to 8 dims.

    Takes uint8 images of any size (like the real Inception network, it resizes nothing itself
    beyond adaptive pooling), returns float features: FID features, or IS logits.
    """

    def __init__(self, dim: int = 8, seed: int = 0) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.register_buffer("proj", torch.randn(48, dim, generator=g) / 4)
        self.num_features = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert x.dtype == torch.uint8 and x.shape[1] == 3
        pooled = torch.nn.functional.adaptive_avg_pool2d(x.float() / 255.0, (4, 4)).flatten(1)
        return pooled @ self.proj
