"""unirag.data.loader.ahead: a local loop's calls worked with their images decoded ahead, in any order asked."""

from __future__ import annotations

import numpy as np

from unirag.data.images import load_rgb
from unirag.data.loader import ahead


def test_a_group_worked_again_after_later_ones_leaves_the_rest_decoded_ahead(coco_mini, decoded_here):
    """A retry of an earlier call (run_items retries a failed item after the others) is worked the plain
    way, and the calls after it still find their images decoded: the decoded stream only goes forward,
    and taking a group behind it would have run it dry."""
    photos = sorted((coco_mini / "images").glob("*.jpg"))[:5]
    work, stream = ahead([[p] for p in photos], key=str, prepare=lambda p: p, image_paths=lambda ps: [str(ps[0])],
                         work=lambda ps, images: np.asarray(load_rgb(ps[0], ahead=images)).sum(), workers=1)
    try:
        sums = {}
        for p in (photos[0], photos[2], photos[1], photos[3], photos[4]):
            sums[p] = work([p])
    finally:
        stream.close()
    assert decoded_here == [photos[1].name]  # only the call worked out of order decoded here
    assert sums == {p: np.asarray(load_rgb(p)).sum() for p in photos}
