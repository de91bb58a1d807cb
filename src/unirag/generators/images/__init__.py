"""Image generators: the request, the result and the base class (``base.py``) and the local models.

Spec strings select a backend (:mod:`unirag.generators.registry`); the API image backends live with
their provider's caption backend (:mod:`~unirag.generators.openai_compat`, :mod:`~unirag.generators.gemini`).
"""
