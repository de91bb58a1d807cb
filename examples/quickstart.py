"""unirag from Python, offline, on the bundled sample (51 COCO val2017 photos, 255 captions).

    python examples/quickstart.py [--index DIR]

Builds an index of the sample with the offline encoder (reused when DIR already holds one),
retrieves the top-5 image-caption pairs for a photo, captions the photo from them, and scores the
retrieval. The test suite runs this script.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from PIL import Image

import unirag
from unirag.demo import SAMPLE


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--index", default="demo-index", help="index directory (built when missing)")
    index_dir = Path(parser.parse_args(argv).index)

    # 1. An index of the sample pool (images and captions; the pool records which belong together).
    if (index_dir / "manifest.json").exists():
        index = unirag.Index.open(index_dir)
    else:
        pool = unirag.Pool.from_coco(SAMPLE / "captions.json", images_root=SAMPLE / "images")
        index = unirag.Index.build(pool, index_dir)
    print(index)

    # 2. The top-5 image-caption pairs for a photo, leaving out the photo's own captions.
    photo = Image.open(SAMPLE / "images" / "000000397133.jpg")
    own = {c.did for c in index.pool if c.source_id == "397133" and c.txt}
    retriever = unirag.Retriever(index)
    hits = retriever.search(photo, k=5, exclude=own)
    for pair in hits.pairs:  # the k examples; a hit whose pair would show the photo itself has none
        print(f"{pair.score:.3f}  {pair.text_did:<18} {pair.image.name}  {pair.caption}")

    # 3. A caption from those examples (any generator spec: openai:gpt-4o, hf:llava-hf/..., ...).
    caption = unirag.Captioner("retrieval:consensus").caption(photo, hits)
    print("caption:", caption.text)

    # 4. How well did retrieval do, with the photo's own captions as the relevant ones?
    with_own = retriever.search(photo, k=5)
    print(unirag.retrieval_metrics({"photo": with_own}, {"photo": own}, k=[1, 5]))


if __name__ == "__main__":
    main()
