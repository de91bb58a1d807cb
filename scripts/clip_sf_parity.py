"""Print how far unirag's UniIR CLIP-SF vectors are from OpenAI's transform + tokenizer + forward pass.

Uses the test suite's references (``tests/openai_clip_reference.py``: OpenAI's ``clip/model.py`` forward and
``clip/simple_tokenizer.py`` tokenizer; OpenAI's ``_transform`` in
PIL/numpy) and tiny random checkpoints (224 pixels with 32-pixel patches; the real 49,408-token BPE), on the
51 committed COCO photos plus each of them turned portrait, and on the tokenizer test's texts::

    .venv/bin/python scripts/clip_sf_parity.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "encoders")]
    import numpy as np
    import torch
    from PIL import Image
    from test_openai_clip_tokenizer import TEXTS

    from openai_clip_reference import (
        OpenAIReferenceTokenizer,
        normalise,
        openai_pixels,
        ref_encode_image,
        ref_encode_text,
    )
    from tiny_models import tiny_uniir_clip_sf
    from unirag.encoders.instructions import format_string
    from unirag.encoders.registry import load_encoder

    def load(ckpt):
        sd = torch.load(ckpt, map_location="cpu", weights_only=True)["model"]
        raw = {k.removeprefix("clip_model."): v.double() for k, v in sd.items()}
        return load_encoder(f"uniir:clip_sf:{ckpt}", device="cpu", dtype="float32", use_instructions=False), raw

    coco = REPO / "tests" / "fixtures" / "coco-mini"
    rows = [json.loads(line) for line in (coco / "captions.jsonl").read_text().splitlines()]
    images = [Image.open(coco / r["image"]).convert("RGB") for r in rows]
    images += [im.rotate(90, expand=True) for im in images]
    enc, raw = load(tiny_uniir_clip_sf(image_size=224, patch=32))
    pixels = torch.from_numpy(np.stack([openai_pixels(im, 224) for im in images])).double()
    diff = np.abs(enc.encode_images(images) - normalise(ref_encode_image(raw, pixels).numpy())).max()
    print(f"images: {len(images)} (COCO photos and each turned portrait): max |unirag - OpenAI| = {diff:.2e}")

    enc, raw = load(tiny_uniir_clip_sf(real_bpe=True))
    tok = OpenAIReferenceTokenizer()
    tokens = torch.zeros(len(TEXTS), 77, dtype=torch.long)
    for i, text in enumerate(TEXTS):
        ids = tok.tokenize(format_string(text))
        tokens[i, : len(ids)] = torch.tensor(ids)
    same = [row[m.bool()].tolist() for row, m in zip(*enc.tokenize(TEXTS).values(), strict=True)]
    diff = np.abs(enc.encode_texts(TEXTS) - normalise(ref_encode_text(raw, tokens).numpy())).max()
    print(f"texts: {len(TEXTS)}: token ids equal OpenAI's for "
          f"{sum(s == tok.tokenize(t) for s, t in zip(same, TEXTS, strict=True))}/{len(TEXTS)}; "
          f"max |unirag - OpenAI| = {diff:.2e}")


if __name__ == "__main__":
    main()
