"""Held-out retrieval quality of the offline encoder's joint space vs plain ASIF, and its encode speed.

Split: the 159 COCO val2017-mini photos are shuffled (seed 0) into two halves. For each fold, anchors
are all 3,000 Myntra pairs + one half of COCO mini; the other half (≈80 photos, 5 captions each) is
held out: its photos and captions are never anchors, and its captions are excluded from the mean
caption embedding. Image→text hit@k: one of the photo's 5 captions among the top k of all held-out
captions; text→image R@k: the caption's photo among the top k held-out photos. Reported per fold and
averaged. Every method uses the same anchors and features:

- ``asif``: ASIF relative representations only (EfficientNet pooled features centred, k=100, p=4 —
  the best ASIF setting of a small sweep; p=8 as in the paper is also shown).
- ``label-bridge``: ImageNet class probabilities x MiniLM class-name embeddings, centred (no anchors).
- ``bridge+asif (shipped)``: the shipped method, 0.75 bridge + 0.25 ASIF on PCA-256 features.

Needs the feature cache written by ``scripts/build_offline_anchors.py`` (computed if missing).

    .venv/bin/python benchmarks/bench_offline_encoder.py [--data ../shared/data]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

from build_offline_anchors import DEFAULT_CACHE, fit_space, load_or_compute_features  # noqa: E402

from unirag.encoders.joint_space import JointSpaceParams  # noqa: E402

KS = (1, 5, 10)


def retrieval_metrics(img_vecs: np.ndarray, cap_vecs: np.ndarray, cap_owner: np.ndarray) -> dict[str, float]:
    sims = img_vecs @ cap_vecs.T
    pos = cap_owner[None, :] == np.arange(len(img_vecs))[:, None]
    out = {}
    i2t = np.argsort(-sims, axis=1)
    for k in KS:
        out[f"i2t_hit@{k}"] = float(np.take_along_axis(pos, i2t[:, :k], axis=1).any(axis=1).mean())
    t2i = np.argsort(-sims.T, axis=1)
    for k in KS:
        out[f"t2i_R@{k}"] = float(np.take_along_axis(pos.T, t2i[:, :k], axis=1).any(axis=1).mean())
    return out


METHODS = {
    "asif (k=100, p=8)": JointSpaceParams(asif_weight=1.0, pca_dim=1280, k=100, power=8.0),
    "asif (k=100, p=4)": JointSpaceParams(asif_weight=1.0, pca_dim=1280, k=100, power=4.0),
    "label-bridge only": JointSpaceParams(asif_weight=0.0),
    "bridge+asif (shipped)": JointSpaceParams(),
}


def quality(feats: dict[str, np.ndarray], seed: int = 0) -> dict[str, list[dict[str, float]]]:
    n = len(feats["coco_ids"])
    perm = np.random.default_rng(seed).permutation(n)
    folds = [(perm[n // 2 :], perm[: n // 2]), (perm[: n // 2], perm[n // 2 :])]  # (held, anchors)
    results: dict[str, list[dict[str, float]]] = {m: [] for m in METHODS}
    for held, anchors in folds:
        caps = feats["coco_caption_emb"][held]  # (h, 5, d)
        cap_owner = np.repeat(np.arange(len(held)), caps.shape[1])
        for name, params in METHODS.items():
            space = fit_space(feats, anchors, feats["coco_ids"][held], params)
            iv = space.image_vectors(feats["coco_pooled"][held], feats["coco_logits"][held])
            tv = space.text_vectors(caps.reshape(-1, caps.shape[-1]))
            results[name].append(retrieval_metrics(iv, tv, cap_owner))
    return results


def speed(data: Path, n_images: int = 48) -> dict[str, float]:
    from unirag.encoders.registry import load_encoder

    rows = [json.loads(x) for x in (data / "coco-val2017-mini" / "captions.jsonl").read_text().splitlines()][:n_images]
    paths = [data / "coco-val2017-mini" / r["image"] for r in rows]
    texts = [c for r in rows for c in r["captions"]]
    t0 = time.perf_counter()
    enc = load_encoder()
    enc.encode_texts(texts[:2])
    enc.encode_images(paths[:2])  # load both models before timing
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    enc.encode_images(paths)
    img_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    enc.encode_texts(texts)
    txt_s = time.perf_counter() - t0
    return {"load_s": load_s, "images_per_s": len(paths) / img_s, "texts_per_s": len(texts) / txt_s}


def shipped_end_to_end(data: Path) -> dict[str, float]:
    """The shipped encoder, end to end from JPEG files, on the COCO-mini photos its anchors leave out."""
    from unirag.encoders.offline import asset_metadata
    from unirag.encoders.registry import load_encoder

    held = set(asset_metadata()["held_out_coco_image_ids"])
    rows = [json.loads(x) for x in (data / "coco-val2017-mini" / "captions.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r["image_id"] in held]
    enc = load_encoder()
    iv = enc.encode_images([data / "coco-val2017-mini" / r["image"] for r in rows])
    tv = enc.encode_texts([c for r in rows for c in r["captions"]])
    return {"n": len(rows), **retrieval_metrics(iv, tv, np.repeat(np.arange(len(rows)), 5))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--no-speed", action="store_true")
    args = ap.parse_args(argv)
    feats = load_or_compute_features(args.data, args.cache, JointSpaceParams().class_prompt)
    res = quality(feats)
    cols = [f"i2t_hit@{k}" for k in KS] + [f"t2i_R@{k}" for k in KS]
    print("held-out COCO val2017-mini, 2 folds (~80 photos / ~400 captions each), anchors = 3000 Myntra + other half")
    print(f"{'method':24s} " + " ".join(f"{c:>10s}" for c in cols) + "   (fold0 / fold1 i2t@5, t2i@5)")
    base = None
    for name, folds in res.items():
        mean = {c: float(np.mean([f[c] for f in folds])) for c in cols}
        base = base or mean
        extra = " / ".join(f"{f['i2t_hit@5']:.3f},{f['t2i_R@5']:.3f}" for f in folds)
        print(f"{name:24s} " + " ".join(f"{mean[c]:10.3f}" for c in cols) + f"   ({extra})")
    shipped = {c: float(np.mean([f[c] for f in res["bridge+asif (shipped)"]])) for c in cols}
    best_asif = {c: max(float(np.mean([f[c] for f in res[m]])) for m in METHODS if m.startswith("asif")) for c in cols}
    print("ratio shipped / best ASIF: " + " ".join(f"{c}={shipped[c] / best_asif[c]:.2f}x" for c in cols))
    e2e = shipped_end_to_end(args.data)
    print(f"shipped encoder end to end on its {e2e['n']} held-out COCO photos ({5 * e2e['n']} captions): "
          + " ".join(f"{c}={e2e[c]:.3f}" for c in cols))
    if not args.no_speed:
        s = speed(args.data)
        print(f"offline encoder speed (CPU, torch threads as configured): load+warm-up {s['load_s']:.1f}s, "
              f"{s['images_per_s']:.1f} images/s, {s['texts_per_s']:.1f} texts/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
