"""Encoders map texts, images and image+text pairs into one L2-normalised vector space: see
:func:`unirag.encoders.registry.load_encoder` and :func:`unirag.encoders.registry.load_text_encoder`."""
