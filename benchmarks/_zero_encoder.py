"""A zero-cost ``python:`` encoder for ``bench_serve.py``: what a GPU model looks like to the service.

Each text or image becomes a fixed pseudo-random unit vector derived from a CRC of its content, so
encoding costs microseconds and the benchmark measures the service itself (parsing, batching,
FAISS, serialisation). ``python:_zero_encoder:make`` with ``benchmarks/`` on ``PYTHONPATH``.
"""

from __future__ import annotations

import zlib

import numpy as np

DIM = 64


def _vector(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)


class ZeroCostEncoder:
    name = "zero-cost"
    dim = DIM

    def identity(self) -> dict:
        return {"kind": "zero-cost", "dim": DIM}

    def embed_texts(self, texts):
        return np.stack([_vector(zlib.crc32(t.encode())) for t in texts])

    def embed_images(self, images):
        return np.stack([_vector(zlib.crc32(im.resize((8, 8)).tobytes())) for im in images])


def make():
    return ZeroCostEncoder()
