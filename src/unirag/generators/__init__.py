"""Generator backends: caption (text) generators and image generators, selected by spec strings.

``openai:gpt-4o``, ``gemini:gemini-1.5-pro``, ``hf:llava-hf/llava-1.5-7b-hf`` (or a local path),
``retrieval:consensus``, ``openai-image:gpt-image-1``, ``diffusers:DIR``... See ``registry.py``.
"""
