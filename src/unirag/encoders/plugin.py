"""``python:MODULE:FACTORY``: bring your own encoder (open_clip, ONNX, an in-house model).

``load_encoder("python:mypkg.enc:make")`` imports ``mypkg.enc`` and calls ``make(**options)`` with the
options it declares (``device``, ``dtype``, ``batch_size``), by the import and option rules of ``python:``
generators (:func:`unirag.generators.registry.load_factory`). The object it returns needs ``dim``,
``name``, ``identity()`` (hashed into the fingerprint), ``embed_images`` and ``embed_texts`` (raw
vectors); optionally ``fusion``, ``batch_size``, ``close()``, and ``preprocess`` with
``embed_preprocessed`` to run the preprocessing in the decode workers. The table and an example:
docs/throughput.md ("Bring your own encoder").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from unirag.encoders.base import FUSION_RAW_SUM, Encoder, ImageInput
from unirag.errors import ConfigError

PREFIX = "python:"
REQUIRED = ("embed_images", "embed_texts", "identity")


def is_plugin_spec(spec: str | None) -> bool:
    return spec is not None and spec.strip().lower().startswith(PREFIX)


class PluginEncoder(Encoder):
    """An encoder built by a user factory (see the module docstring)."""

    def __init__(self, spec: str, *, device: str | None = "auto", dtype: str | None = "auto",
                 batch_size: int | None = None) -> None:
        from unirag.generators.registry import declared_options, load_factory

        self.spec = spec.strip()
        target = self.spec[len(PREFIX):]
        factory = load_factory(target, "encoder")
        self.inner = factory(**declared_options(factory, {"device": device, "dtype": dtype,
                                                          "batch_size": batch_size}))
        missing = [m for m in REQUIRED if not callable(getattr(self.inner, m, None))]
        dim = getattr(self.inner, "dim", None)
        if missing or not isinstance(dim, int) or dim <= 0:
            what = ", ".join([f"{m}()" for m in missing] + ([] if isinstance(dim, int) and dim > 0 else ["dim"]))
            raise ConfigError(f"{PREFIX}{target} returned a {type(self.inner).__name__} without {what}; an encoder "
                              "needs dim, name, identity(), embed_images() and embed_texts()")
        self.dim = dim
        self.name = str(getattr(self.inner, "name", None) or self.spec)
        self.fusion = str(getattr(self.inner, "fusion", FUSION_RAW_SUM))
        self.batch_size = batch_size or int(getattr(self.inner, "batch_size", 0) or 32)
        pre, emb = getattr(self.inner, "preprocess", None), getattr(self.inner, "embed_preprocessed", None)
        self._preprocess = pre if callable(pre) and callable(emb) else None

    def identity(self) -> dict[str, Any]:
        return {**super().identity(), "backend": "python", "plugin": self.inner.identity()}

    def config(self) -> dict[str, Any]:
        return {**super().config(), "spec": self.spec}

    def _vectors(self, out: Any, n: int, what: str) -> np.ndarray:
        array = np.asarray(out, dtype=np.float32)
        if array.shape != (n, self.dim):
            raise ConfigError(f"{self.spec}: {what} returned shape {array.shape}, expected ({n}, {self.dim})")
        return array

    def _embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        return self._vectors(self.inner.embed_texts(list(texts)), len(texts), "embed_texts")

    def _embed_images(self, images: Sequence[ImageInput]) -> np.ndarray:
        if self._preprocess is not None:
            return super()._embed_images(images)
        from unirag.data.images import load_rgb

        return self._vectors(self.inner.embed_images([load_rgb(im) for im in images]), len(images), "embed_images")

    def image_preprocessor(self):
        return self._preprocess

    def _embed_preprocessed(self, batch: np.ndarray) -> np.ndarray:
        return self._vectors(self.inner.embed_preprocessed(batch), len(batch), "embed_preprocessed")

    def close(self) -> None:
        if callable(getattr(self.inner, "close", None)):
            self.inner.close()
        super().close()
