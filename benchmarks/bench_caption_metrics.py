"""Caption metrics speed: unirag's ``caption_metrics`` vs pycocoevalcap called by hand, same captions.

Data: the official COCO val2017 caption file (real, 5,000 images x ~5 captions); for the first
``--n`` images the candidate is the first caption and the references are the others. Baseline: the
COCO toolkit flow by hand (PTBTokenizer on references, PTBTokenizer on candidates, Bleu(4),
Meteor, Rouge, Cider), measured in the same process. Both must give the same numbers (checked).

    .venv/bin/python benchmarks/bench_caption_metrics.py --n 1000
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CAPTIONS = REPO.parent / "shared" / "data" / "coco-val2017-mini" / "captions_val2017_all5000.json"


def load(path: Path, n: int) -> tuple[dict[str, str], dict[str, list[str]]]:
    data = json.loads(path.read_text())
    caps: dict[int, list[str]] = defaultdict(list)
    for a in data["annotations"]:
        caps[a["image_id"]].append(a["caption"])
    ids = sorted(caps)[:n]
    return {str(i): caps[i][0] for i in ids}, {str(i): caps[i][1:] for i in ids}


def by_hand(cands: dict[str, str], refs: dict[str, list[str]]) -> dict[str, float]:
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.cider.cider import Cider
    from pycocoevalcap.meteor.meteor import Meteor
    from pycocoevalcap.rouge.rouge import Rouge
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    tok = PTBTokenizer()
    gts = tok.tokenize({k: [{"caption": c} for c in v] for k, v in refs.items()})
    res = tok.tokenize({k: [{"caption": v}] for k, v in cands.items()})
    bleu, _ = Bleu(4).compute_score(gts, res, verbose=0)
    meteor, _ = Meteor().compute_score(gts, res)
    rouge, _ = Rouge().compute_score(gts, res)
    cider, _ = Cider().compute_score(gts, res)
    return {"BLEU-1": bleu[0], "BLEU-2": bleu[1], "BLEU-3": bleu[2], "BLEU-4": bleu[3], "METEOR": meteor,
            "ROUGE-L": float(rouge), "CIDEr": float(cider)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--captions", type=Path, default=DEFAULT_CAPTIONS)
    ap.add_argument("--n", type=int, default=1000, help="images (one candidate each)")
    args = ap.parse_args()
    from unirag.metrics.captions import caption_metrics

    cands, refs = load(args.captions, args.n)
    t = time.perf_counter()
    baseline = by_hand(cands, refs)
    t_base = time.perf_counter() - t
    t = time.perf_counter()
    ours = caption_metrics(cands, refs, spice=True, strip_prefixes=False)
    t_ours = time.perf_counter() - t
    t = time.perf_counter()
    no_meteor = caption_metrics(cands, refs, spice=True, strip_prefixes=False, meteor=False)
    t_fast = time.perf_counter() - t
    worst = max(abs(ours[k] - 100 * v) for k, v in baseline.items())
    assert worst < 1e-9, f"scores differ from the hand run by {worst}"
    assert all(abs(no_meteor[k] - ours[k]) < 1e-9 for k in no_meteor)
    per_1000 = 1000 / len(cands)
    print(f"{len(cands)} candidates, {sum(map(len, refs.values()))} references")
    print("scores (x100): " + ", ".join(f"{k} {v:.2f}" for k, v in ours.items()))
    print(f"baseline pycocoevalcap by hand : {t_base:7.2f} s  ({t_base * per_1000:.2f} s per 1,000 captions)")
    print(f"unirag caption_metrics         : {t_ours:7.2f} s  ({t_ours * per_1000:.2f} s per 1,000 captions)"
          f"  ratio {t_base / t_ours:.2f}x")
    print(f"unirag caption_metrics no METEOR: {t_fast:7.2f} s  ({t_fast * per_1000:.2f} s per 1,000 captions)"
          f"  ratio {t_base / t_fast:.2f}x")
    print(f"max |difference| vs hand run: {worst:.2e}")


if __name__ == "__main__":
    main()
