"""Encoders map texts, images and image+text pairs into one L2-normalised vector space.

Use :func:`unirag.encoders.registry.load_encoder` with a name or path; see ``registry.py``.
"""
