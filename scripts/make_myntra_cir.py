"""Build the real-image CIR demo set from the Myntra product photos (see scripts/myntra_cir.py).

    python scripts/make_myntra_cir.py ../shared/data/myntra-fashion-3k OUT_DIR [--queries 200] [--seed 0]

Writes OUT_DIR/mbeir/{queries,pool}.jsonl (M-BEIR task 7) and OUT_DIR/fashioniq/{captions,image_splits}
(FashionIQ format); then e.g.
    unirag cir --dataset mbeir --annotations OUT_DIR/mbeir/queries.jsonl --split-file OUT_DIR/mbeir/pool.jsonl \\
        --images-root ../shared/data/myntra-fashion-3k --out runs/myntra-cir
"""

from __future__ import annotations

import argparse
from pathlib import Path

from myntra_cir import build_colour_cir, build_fashioniq_format


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("myntra_dir", type=Path)
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    q, p = build_colour_cir(args.myntra_dir / "products.jsonl", args.out_dir / "mbeir", args.queries, args.seed)
    files = build_fashioniq_format(args.myntra_dir / "products.jsonl", args.out_dir / "fashioniq",
                                   n_per_category=args.queries // 2, seed=args.seed)
    print(f"wrote {q}, {p}")
    for f in files:
        print(f"wrote {f}")


if __name__ == "__main__":
    main()
