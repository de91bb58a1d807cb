"""``make demo``: the whole UniRAG captioning pipeline, offline, on the bundled COCO sample.

import -> index build (offline encoder) -> retrieve both directions -> evaluate retrieval ->
RAG captioning with the offline consensus captioner (leakage-free retrieval) -> caption metrics.
Every step is the same CLI command a user would type; a rerun reuses finished outputs.
"""

from pathlib import Path

#: The bundled sample: ``captions.json`` (COCO format) and ``images/`` (51 COCO val2017 photos).
SAMPLE = Path(__file__).resolve().parent / "data"
