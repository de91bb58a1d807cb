"""Local Hugging Face vision-language models (LLaVA family and other image-text-to-text models).

``hf:llava-hf/llava-1.5-7b-hf`` or ``hf:/path/to/checkpoint`` loads ``AutoProcessor`` +
``AutoModelForImageTextToText`` and formats each prompt with the processor's own chat template, so
a checkpoint gets the format it was trained with. Prompts are batched (left padding), greedy by
default. LLaVA-1.5 accepts one image per prompt, hence the ``llava`` template family with a merged
image; models that take several images can use ``family="gpt4o"`` (interleaved).

``device``/``dtype`` follow :mod:`unirag.runtime`; ``device="balanced"`` spreads a model too large for
one GPU over all of them (``device_map="auto"``).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from unirag.errors import BackendError, ConfigError
from unirag.generators.base import Generation, GenerationOptions, TextGenerator, Usage
from unirag.messages import ImagePart, Message, TextPart
from unirag.runtime import DTYPE_CHOICES, free_memory

#: The LLaVA-1.5 conversation format: used when a processor ships no chat template, and always with
#: ``prompt_format="official"``: UniRAG's ``infer_llava`` writes ``f"USER: <image>\n{SYSTEM_MESSAGE}\n{message}
#: \nASSISTANT:"`` by hand (castorini/UniRAG src/unirag/caption_generation_inference.py@e9a4e00:250-251).
FALLBACK_FORMAT = "USER: {images}{text}\nASSISTANT:"
PROMPT_FORMATS = ("chat-template", "official")


class HFVisionLanguageGenerator(TextGenerator):
    def __init__(self, model: str, *, device: str | None = "auto", dtype: str | None = "auto", batch_size: int = 4,
                 family: str = "llava", spec: str | None = None, prompt_format: str = "chat-template",
                 trust_remote_code: bool = False) -> None:
        """``prompt_format``: ``chat-template`` (the processor's) or ``official`` (UniRAG's hand-written
        LLaVA string, see :data:`FALLBACK_FORMAT`). ``trust_remote_code``: let a checkpoint that ships its
        own modelling code (InternVL3, the official X^R agents' model) run it; off unless asked for, as it
        executes Python from the checkpoint."""
        self.trust_remote_code = bool(trust_remote_code)
        if prompt_format not in PROMPT_FORMATS:
            raise ConfigError(f"unknown prompt_format {prompt_format!r}; expected one of {', '.join(PROMPT_FORMATS)}")
        self.prompt_format = prompt_format
        self.model_id = model
        self.spec = spec or f"hf:{model}"
        if dtype is not None and dtype not in DTYPE_CHOICES:
            raise ConfigError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPE_CHOICES)}")
        self.dtype = dtype or "auto"
        self.device = device or "auto"
        self.batch_size = max(1, int(batch_size))
        self.template_family = family
        self.image_mode = "single-image" if family == "llava" else "multi-image"
        self._model = None
        self._processor = None
        self._lock = threading.Lock()

    # -- loading ---------------------------------------------------------------------------------
    def _load(self) -> None:
        if self._model is not None:
            return
        from transformers import AutoModelForImageTextToText, AutoProcessor

        from unirag.runtime import device_map_kwargs, hf_from_pretrained, resolve_device, resolve_dtype

        spread = self.device == "balanced"  # several GPUs: let accelerate place the layers
        device = resolve_device("cuda" if spread else self.device)
        torch_dtype = resolve_dtype(self.dtype, device)
        kwargs: dict[str, Any] = {"dtype": torch_dtype}
        kwargs.update({"device_map": "auto"} if spread else device_map_kwargs(device))
        local = Path(self.model_id).expanduser()
        source = str(local) if local.exists() else self.model_id
        remote = {"trust_remote_code": True} if self.trust_remote_code else {}
        try:
            processor = hf_from_pretrained(AutoProcessor, source, "VLM processor", **remote)
            model = hf_from_pretrained(AutoModelForImageTextToText, source, "VLM", **kwargs, **remote)
        except ConfigError as e:
            if self.trust_remote_code or "trust_remote_code" not in str(e):
                raise
            raise ConfigError(f"{e} (the checkpoint ships its own code: pass trust_remote_code=True / "
                              "--option trust_remote_code=true if you trust it)") from None
        if "device_map" not in kwargs:
            model = model.to(device)
        tok = getattr(processor, "tokenizer", None)
        if tok is not None:
            tok.padding_side = "left"  # decoder-only batched generation
            if tok.pad_token is None:
                tok.pad_token = tok.eos_token
        self._device = model.device if spread else device
        self._torch_dtype = torch_dtype
        self._processor, self._model = processor, model.eval()

    def _prompt(self, messages: list[Message]) -> tuple[str, list[ImagePart]]:
        """The text the processor receives (chat template, image placeholders in place, or the official
        string) and the images in order."""
        conv: list[dict[str, Any]] = []
        images: list[ImagePart] = []
        for m in messages:
            conv.append({"role": m.role, "content": [{"type": "text", "text": p.text}
                                                     if isinstance(p, TextPart) else {"type": "image"}
                                                     for p in m.parts]})
            images += m.images
        proc = self._processor
        if self.prompt_format == "chat-template" and getattr(proc, "chat_template", None):
            return proc.apply_chat_template(conv, add_generation_prompt=True), images
        token = getattr(proc, "image_token", "<image>")
        text = "\n".join(p.text for m in messages for p in m.parts if isinstance(p, TextPart))
        return FALLBACK_FORMAT.format(images=(token + "\n") * len(images), text=text), images

    def sent_prompt(self, messages: list[Message], options: GenerationOptions | None = None) -> str:
        """The exact text the processor receives (loads the processor)."""
        with self._lock:
            self._load()
            return self._prompt(messages)[0]

    # -- generation ------------------------------------------------------------------------------
    def generate(self, messages: list[Message], options: GenerationOptions | None = None) -> Generation:
        return self.generate_batch([messages], options)[0]

    def generate_batch(self, batch: list[list[Message]], options: GenerationOptions | None = None) -> list[Generation]:
        options = options or GenerationOptions()
        with self._lock:
            self._load()
            import torch

            texts, images = [], []
            for messages in batch:
                text, parts = self._prompt(messages)
                texts.append(text)
                images.append([p.load() for p in parts])
            flat = [im for ims in images for im in ims]
            try:
                inputs = self._processor(text=texts, images=flat or None, padding=True, return_tensors="pt")
                # Token ids stay integers; floating inputs (pixel values) take the model's precision
                # (a processor's BatchFeature casts only its floating tensors).
                inputs = inputs.to(self._device, dtype=self._torch_dtype)
                gen_kwargs = {"max_new_tokens": options.max_tokens, **options.given("repetition_penalty")}
                if options.temperature is not None:  # None: the model's generation config decides (official)
                    gen_kwargs["do_sample"] = options.temperature > 0
                    if options.temperature > 0:
                        gen_kwargs["temperature"] = options.temperature
                with torch.inference_mode():
                    out = self._model.generate(**inputs, **gen_kwargs)
            except torch.cuda.OutOfMemoryError as e:
                raise BackendError(f"{self.spec}: out of GPU memory ({e}); lower --batch-size or k", kind="oom") from None
            # Any other exception (a shape mismatch, a processor bug) is a programming error: it stops the
            # run with its traceback instead of turning every query into a recorded failure.
            prompt_len = inputs["input_ids"].shape[1]
            new = out[:, prompt_len:]
            decoded = self._processor.batch_decode(new, skip_special_tokens=True)
            pad = getattr(self._processor.tokenizer, "pad_token_id", None)
            results = []
            for i, text in enumerate(decoded):
                n_in = int(inputs["attention_mask"][i].sum())
                n_out = int((new[i] != pad).sum()) if pad is not None else int(new.shape[1])
                usage = Usage(input_tokens=n_in, input_text_tokens=n_in, input_images=len(images[i]),
                              output_tokens=n_out)
                results.append(Generation(text=text.strip(), usage=usage))
            return results

    def config(self) -> dict[str, Any]:
        """The settings as given (the resolved device and precision: ``_device``, ``_torch_dtype`` once loaded)."""
        return {"spec": self.spec, "backend": "hf", "model": self.model_id, "device": self.device,
                "dtype": self.dtype, "batch_size": self.batch_size, "template_family": self.template_family,
                "image_mode": self.image_mode,
                **({"prompt_format": self.prompt_format} if self.prompt_format != "chat-template" else {}),
                **({"trust_remote_code": True} if self.trust_remote_code else {})}

    def close(self) -> None:
        """Drop the model and return its GPU memory."""
        with self._lock:
            self._model = None
            self._processor = None
        free_memory()
