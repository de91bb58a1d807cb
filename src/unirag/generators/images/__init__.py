"""Image generators (text -> image, optionally with example image-caption pairs in context).

Spec strings select a backend (see ``registry.py``); every backend implements
:class:`~unirag.generators.images.base.ImageGenerator`.
"""
