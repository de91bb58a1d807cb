"""unirag: multimodal retrieval and retrieval-augmented generation.

Heavy libraries (torch, transformers, faiss) are imported lazily inside the functions that need
them, so that importing this package and running ``unirag --help`` stays fast.
"""

__version__ = "0.1.0"
