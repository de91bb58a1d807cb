"""Test doubles and data builders shared by the index and retrieval tests.

* :class:`HashEncoder` - deterministic bag-of-words text vectors and pixel-statistics image vectors;
  records every batch it is asked to embed (to check that the build streams in bounded chunks).
* :class:`CocoOracleEncoder` - like HashEncoder for text, but an image's vector is the mean of its
  real COCO captions' vectors, so retrieval on the real COCO mini set behaves like a good encoder
  (an image's own captions rank first). Images are recognised by a hash of their pixels.
* :func:`write_coco_mbeir` - M-BEIR pool / queries / qrels from the real COCO mini captions, with
  pairing recorded by ``source_id`` (the COCO image id).
"""

from __future__ import annotations

import hashlib
import json
import re
import zlib
from pathlib import Path

import numpy as np

from unirag.data.images import load_rgb
from unirag.data.mbeir import write_candidates, write_qrels, write_queries
from unirag.data.records import Candidate, Modality, Query
from unirag.encoders.base import Encoder

DIM = 64


def word_vector(word: str, dim: int = DIM) -> np.ndarray:
    return np.random.default_rng(zlib.crc32(word.encode())).standard_normal(dim).astype(np.float32)


def text_vector(text: str, dim: int = DIM) -> np.ndarray:
    words = re.findall(r"[a-z0-9]+", text.lower()) or ["<empty>"]
    return np.sum([word_vector(w, dim) for w in words], axis=0)


def pixel_key(image) -> str:
    if not hasattr(image, "resize"):
        image = load_rgb(image)
    return hashlib.sha1(image.convert("RGB").resize((8, 8)).tobytes()).hexdigest()


class HashEncoder(Encoder):
    name = "test-hash"
    dim = DIM

    def __init__(self, batch_size: int = 16, name: str | None = None) -> None:
        self.batch_size = batch_size
        if name is not None:
            self.name = name
        self.text_batches: list[int] = []
        self.image_batches: list[int] = []

    def _embed_texts(self, texts):
        self.text_batches.append(len(texts))
        return np.stack([text_vector(t, self.dim) for t in texts])

    def _embed_images(self, images):
        self.image_batches.append(len(images))
        return np.stack([self._image_vector(im) for im in images])

    def _image_vector(self, image) -> np.ndarray:
        key = pixel_key(image)
        return np.random.default_rng(int(key[:8], 16)).standard_normal(self.dim).astype(np.float32)


class CocoOracleEncoder(HashEncoder):
    name = "test-coco-oracle"

    def __init__(self, captions_by_pixels: dict[str, list[str]], batch_size: int = 16) -> None:
        super().__init__(batch_size)
        self.captions_by_pixels = captions_by_pixels

    def _image_vector(self, image) -> np.ndarray:
        captions = self.captions_by_pixels[pixel_key(image)]
        vecs = [text_vector(c, self.dim) for c in captions]
        return np.mean([v / np.linalg.norm(v) for v in vecs], axis=0)


def coco_items(coco_dir: Path, n_images: int | None = None) -> list[dict]:
    with (coco_dir / "captions.jsonl").open(encoding="utf-8") as f:
        items = [json.loads(line) for line in f if line.strip()]
    return items[:n_images] if n_images else items


def coco_oracle(coco_dir: Path, n_images: int | None = None) -> CocoOracleEncoder:
    table = {pixel_key(coco_dir / it["image"]): it["captions"] for it in coco_items(coco_dir, n_images)}
    return CocoOracleEncoder(table)


def write_coco_mbeir(coco_dir: Path, out: Path, n_images: int | None = None, pairing: bool = True) -> dict[str, Path]:
    """Pool (images + all captions), image->text queries (task 3) and text->image queries (task 0)."""
    out.mkdir(parents=True, exist_ok=True)
    pool: list[Candidate] = []
    img_queries: list[Query] = []
    txt_queries: list[Query] = []
    for it in coco_items(coco_dir, n_images):
        sid = str(it["image_id"]) if pairing else None
        image_did = f"img:{it['image_id']}"
        pool.append(Candidate(image_did, Modality.IMAGE, img_path=it["image"], source_id=sid))
        caption_dids = []
        for j, cap in enumerate(it["captions"]):
            did = f"txt:{it['image_id']}:{j}"
            caption_dids.append(did)
            pool.append(Candidate(did, Modality.TEXT, txt=cap, source_id=sid))
        img_queries.append(Query(f"i2t:{it['image_id']}", Modality.IMAGE, img_path=it["image"],
                                 pos_cand_list=caption_dids, task_id=3))
        txt_queries.append(Query(f"t2i:{it['image_id']}", Modality.TEXT, txt=it["captions"][0],
                                 pos_cand_list=[image_did], task_id=0))
    paths = {"pool": out / "pool.jsonl", "i2t": out / "queries_i2t.jsonl", "t2i": out / "queries_t2i.jsonl",
             "qrels_i2t": out / "qrels_i2t.txt", "qrels_t2i": out / "qrels_t2i.txt"}
    write_candidates(paths["pool"], pool)
    write_queries(paths["i2t"], img_queries)
    write_queries(paths["t2i"], txt_queries)
    write_qrels(paths["qrels_i2t"], img_queries)
    write_qrels(paths["qrels_t2i"], txt_queries)
    return paths


def clustered_vectors(n: int, dim: int, n_clusters: int = 50, noise: float = 0.35, seed: int = 0,
                      centre_seed: int = 1234) -> np.ndarray:
    """Normalised points around random centres (a small stand-in for real embedding clusters)."""
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(centre_seed).standard_normal((n_clusters, dim)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    x = centres[rng.integers(0, n_clusters, n)] + noise * rng.standard_normal((n, dim)).astype(np.float32) / np.sqrt(dim)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def build_from_vectors(chunks, out_dir, dim: int, encoder_info: dict, index_type: str = "flat",
                       params: dict | None = None) -> dict:
    """Write an index from ``(modality, metas, vectors)`` chunks through the one index writer; the manifest."""
    from unirag.index.writer import IndexWriter

    with IndexWriter(out_dir, dim, encoder_info, index_type, params) as writer:
        for modality, metas, vectors in chunks:
            writer.add(modality, metas, vectors)
        return writer.commit()
