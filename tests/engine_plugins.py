"""Deterministic in-process generators for the engine tests (``python:engine_plugins:FACTORY``).

Their replies depend only on the prompt (text and image bytes), so a local run and a Ray run of the
same configuration must store the same records. Each call appends one line to the file named by
``UNIRAG_TEST_CALLS`` (the query image's digest, or the role and prompt hash), written when the call
starts, so a test can count calls across processes: ``UNIRAG_*`` variables reach Ray workers (see
``unirag.ray_support.worker_env``). ``UNIRAG_TEST_DELAY`` slows each call (seconds);
``UNIRAG_TEST_LOADS`` gets a line per model load; ``UNIRAG_TEST_AHEAD`` gets a line per image a
caption or agent call carries: ``ahead`` when the image part comes with the file decoded ahead (its
``decoded`` image), else ``inline``;
``UNIRAG_TEST_DIE_MARKER`` makes the first process that reaches its ``UNIRAG_TEST_DIE_AT``-th call
exit on the spot (a worker killed by the OOM killer), once: the marker file records that it happened.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time

from unirag.generators.base import Generation, Usage


def image_digest(path) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:12]


def _log(line: str) -> None:
    path = os.environ.get("UNIRAG_TEST_CALLS")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")
            f.flush()


class _Calls:
    n = 0


def _maybe_die() -> None:
    marker = os.environ.get("UNIRAG_TEST_DIE_MARKER")
    _Calls.n += 1
    if marker and _Calls.n >= int(os.environ.get("UNIRAG_TEST_DIE_AT", "2")):
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        os._exit(137)


def _text(messages) -> str:
    return " ".join(p.text for m in messages for p in m.parts if hasattr(p, "text"))


def _images(messages) -> list:
    return [p for m in messages for p in m.images]


def _log_ahead(parts) -> None:
    path = os.environ.get("UNIRAG_TEST_AHEAD")
    if not path:
        return
    with open(path, "a") as f:
        for p in parts:
            f.write(("ahead" if p.decoded is not None else "inline") + "\n")


class EchoCaptioner:
    """Captions: the query image's digest and how many example images came with it."""

    template_family = "gpt4o"

    def __init__(self, batch_size: int = 2) -> None:
        self.batch_size = batch_size

    def generate(self, messages, options=None) -> Generation:
        images = _images(messages)
        query = image_digest(images[-1].path)
        _log(query)
        _log_ahead(images)
        _maybe_die()
        time.sleep(float(os.environ.get("UNIRAG_TEST_DELAY", "0")))
        prompt = hashlib.sha256(_text(messages).encode()).hexdigest()[:6]
        return Generation(text=f"a picture {query} after {len(images) - 1} examples ({prompt})",
                          usage=Usage(input_images=len(images), output_tokens=5))

    def generate_batch(self, batch, options=None) -> list[Generation]:
        return [self.generate(m, options) for m in batch]

    def sent_prompt(self, messages, options=None) -> str:
        """Its own wire form, which only the loaded model gives (a Ray driver's stand-in must ask a worker)."""
        return f"echo-captioner wire form, {len(_images(messages))} images, max_tokens " \
               f"{getattr(options, 'max_tokens', None)}: {_text(messages)}\n"

    def config(self) -> dict:
        return {"model": "echo-captioner"}


def make_captioner(batch_size: int = 2) -> EchoCaptioner:
    loads = os.environ.get("UNIRAG_TEST_LOADS")
    if loads:  # one line per model load: process id and batch size
        with open(loads, "a") as f:
            f.write(f"{os.getpid()} {batch_size}\n")
    return EchoCaptioner(batch_size=batch_size)


def make_captioner3() -> EchoCaptioner:
    """A second model for grids (another spec): the same captions, three prompts per batch."""
    return make_captioner(batch_size=3)


class EchoAgent:
    """Plays every X^R role from the prompt alone (the role is told by the prompt's wording)."""

    def generate(self, messages, options=None) -> Generation:
        prompt = _text(messages).strip()
        images = _images(messages)
        _log_ahead(images)
        key = hashlib.sha256((prompt + "".join(image_digest(p.path) for p in images)).encode()).hexdigest()[:12]
        _log(key)
        time.sleep(float(os.environ.get("UNIRAG_TEST_DELAY", "0")))
        tag = "#" + key  # every reply names its call, so a test can tell which calls a run stored
        if prompt.startswith("Describe this image"):
            return Generation(text=f"a product {image_digest(images[0].path)[:6]} {tag}")
        if prompt.startswith("You write verification statements"):
            return Generation(text=json.dumps({"call": tag, "statements": [
                {"statement": "It has the new colour", "answer": True}]}))
        if "Reference caption:" in prompt or "The image shown is the reference image" in prompt:
            field = "modifications" if "Reference caption:" in prompt else "attributes"
            value = [{"attribute": "colour", "present": True}] if field == "attributes" else ["new colour"]
            return Generation(text=json.dumps({"call": tag, "target_caption": "a product in the new colour " + key[:4],
                                               field: value}))
        n = len(re.findall(r"^\d+\. ", prompt, flags=re.M))
        answers = [int(key[i], 16) % 2 == 0 for i in range(max(n, 1))][:n]
        return Generation(text=json.dumps({"call": tag, "answers": answers}))

    def config(self) -> dict:
        return {"model": "echo-agent"}


def make_agent() -> EchoAgent:
    return EchoAgent()
