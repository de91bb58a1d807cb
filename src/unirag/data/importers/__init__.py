"""Importers: COCO captions and generic JSONL/CSV image-caption lists -> M-BEIR files.

Both write the same set of files into an output folder (see :mod:`unirag.data.importers.writer`):
``pool.jsonl``, ``queries_task3_image2text.jsonl``, ``queries_task0_text2image.jsonl``,
``qrels_task3.txt``, ``qrels_task0.txt`` and ``import_summary.json``.
"""

from unirag.data.importers.coco import import_coco
from unirag.data.importers.generic import import_generic

__all__ = ["import_coco", "import_generic"]
