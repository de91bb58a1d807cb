"""Encoders map texts, images and image+text pairs into one L2-normalised vector space.

Use :func:`unirag.encoders.registry.load_encoder` (``None``/"offline" = the bundled offline encoder,
``uniir:clip_sf:PATH`` / ``uniir:blip_ff:PATH`` = UniIR's released retrievers, otherwise a CLIP-family
hub id or local checkpoint directory; ``device=``/``dtype=`` as :mod:`unirag.runtime` resolves them) and
:func:`unirag.encoders.registry.load_text_encoder` (sentence embeddings for text–text similarity).
"""
