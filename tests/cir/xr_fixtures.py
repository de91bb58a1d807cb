"""A 5-candidate CIR world whose X^R scores are computed by hand in test_pipeline_agents.py.

Embeddings come from :class:`TableEncoder`, which looks vectors up in a table, so every similarity
in the test is a number written in the table. Agent replies come from the local OpenAI-protocol
server (tests/fake_openai_server.py) via :func:`responder`, chosen by prompt content, so they do not
depend on the order concurrent calls arrive in.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from pathlib import Path

import numpy as np
from PIL import Image

from fake_openai_server import Reply
from unirag.cir.config import RoleConfig, XRConfig, XRSettings
from unirag.cir.datasets import CirDataset, CirQuery
from unirag.encoders.base import Encoder

COLOURS = {"c1": (200, 0, 0), "c2": (0, 200, 0), "c3": (0, 0, 200), "c4": (200, 200, 0), "c5": (0, 200, 200),
           "ref": (90, 90, 90)}

# text space (A_t^s): C_t = e1, C_v = e2; captions cap1..cap5
TEXT_TABLE = {"ct": (1, 0, 0), "cv": (0, 1, 0), "cap1": (0.6, 0.8, 0), "cap2": (1, 0, 0), "cap3": (0, 0, 1),
              "cap4": (0.8, 0.6, 0), "cap5": (0, 1, 0)}
# joint image-text space (A_v^s and the baseline)
CROSS_TEXT = {"ct": (1, 0, 0), "cv": (0, 1, 0), "make it red": (0, 0, 1)}
CROSS_IMAGE = {"c1": (0.8, 0.6, 0), "c2": (0, 0.8, 0.6), "c3": (0, 0, 1), "c4": (0.28, 0, 0.96),
               "c5": (0.6, 0.8, 0), "ref": (0, 0, 1)}

STATEMENTS = [{"statement": "The dress is red", "answer": True},
              {"statement": "The dress has sleeves", "answer": False}]
TEXT_ANSWERS = {"cap1": [True, True], "cap2": [True, False], "cap3": [False, True], "cap4": [False, False],
                "cap5": [True, False]}
VISION_ANSWERS = {"c1": [False, True], "c2": [True, False], "c3": [True, True], "c4": [True, False],
                  "c5": [True, False]}


def _hashed(text: str) -> list[float]:
    """Texts outside the table (e.g. a random model's captions) get a fixed pseudo-random vector."""
    h = hashlib.sha256(text.encode()).digest()
    return [b / 255 + 0.01 for b in h[:3]]


class TableEncoder(Encoder):
    def __init__(self, texts: dict, images: dict | None = None, name: str = "table") -> None:
        self.texts, self.images, self.name, self.dim = texts, images or {}, name, 3

    def _embed_texts(self, texts):
        return np.array([self.texts[t] if t in self.texts else _hashed(t) for t in texts], dtype=np.float32)

    def _embed_images(self, images):
        """Images arrive decoded (the decode pool reads the files): each toy image is one colour, named
        by COLOURS; a path (an in-memory call) is looked up by its stem."""
        by_colour = {rgb: name for name, rgb in COLOURS.items()}

        def name_of(im):
            return Path(im).stem if isinstance(im, str | Path) else by_colour[im.convert("RGB").getpixel((0, 0))]

        return np.array([self.images[name_of(im)] for im in images], dtype=np.float32)


def make_world(root: Path) -> CirDataset:
    root.mkdir(parents=True, exist_ok=True)
    for name, rgb in COLOURS.items():
        Image.new("RGB", (8, 8), rgb).save(root / f"{name}.png")
    pool = {f"c{i}": f"c{i}.png" for i in range(1, 6)}
    q = CirQuery("q1", "query:q1", "make it red", targets=["c5"], reference_path="ref.png")
    return CirDataset("toy", "mbeir", [q], pool, root)


def _image_names(root: Path) -> dict[str, str]:
    """sha256 of the PNG bytes -> image name, to recognise images inside data URLs."""
    return {hashlib.sha256((root / f"{n}.png").read_bytes()).hexdigest(): n for n in COLOURS}


def responder(root: Path, malformed: bool = True):
    names = _image_names(root)

    def image_of(body) -> str | None:
        for m in body["messages"]:
            if isinstance(m["content"], list):
                for p in m["content"]:
                    if p["type"] == "image_url":
                        data = base64.b64decode(p["image_url"]["url"].split(",", 1)[1])
                        return names[hashlib.sha256(data).hexdigest()]
        return None

    def text_of(body) -> str:
        m = body["messages"][0]["content"]
        return (m if isinstance(m, str) else " ".join(p.get("text", "") for p in m)).strip()

    def reply(req) -> Reply:
        body = req.json
        prompt, img, retry = text_of(body), image_of(body), len(body["messages"]) > 1
        if prompt.startswith("Describe this image"):
            return Reply.chat("capr" if img == "ref" else f"cap{img[1]}")
        if "Reference caption: capr" in prompt:
            # prose + fenced JSON: repaired by extraction
            return Reply.chat('Sure! Here it is:\n```json\n{"target_caption": "ct", "modifications": '
                              '["colour: grey -> red"],}\n```')
        if "The image shown is the reference image" in prompt:
            if malformed and not retry:
                return Reply.chat("I imagine a red dress.")  # no JSON: asked again
            return Reply.chat(json.dumps({"target_caption": "cv",
                                          "attributes": [{"attribute": "red colour", "present": True}]}))
        if prompt.startswith("You write verification statements"):
            return Reply.chat(json.dumps({"statements": STATEMENTS}))
        if prompt.startswith("Here is the caption of an image"):
            cap = re.search(r"caption of an image:\n(\S+)", prompt).group(1)
            ans = TEXT_ANSWERS[cap]
            if malformed and cap == "cap4":
                return Reply.chat(str({"answers": ans}))  # Python literal: repaired
            return Reply.chat(json.dumps({"answers": ans}))
        if prompt.startswith("Look at the image"):
            ans = VISION_ANSWERS[img]
            if malformed and img == "c1" and not retry:
                return Reply.chat(json.dumps({"answers": ans[:1]}))  # wrong count: asked again
            return Reply.chat(json.dumps({"answers": ans}))
        return Reply.error(400, f"unexpected prompt: {prompt[:80]}")

    return reply


# -- the official profile (test_xr_official*.py) ---------------------------------------------------
ROLES = ("caption", "text_imagination", "vision_imagination", "question", "text_question", "vision_question")
QUESTIONS = {"Is the dress red?": 0, "Does the dress have sleeves?": 1}


def agent_config(url: str, **kw) -> XRConfig:
    roles = {r: RoleConfig(model="openai:fake-vlm", options={"base_url": url}) for r in ROLES}
    return XRConfig(roles=roles, settings=XRSettings(k_prime=3, k=5, lam=0.5), **kw)


def single_responder(root, fail_captions=(), stand_in_answers=(True, True)):
    """The world's replies, plus the one-statement yes/no calls and a fake official checkout's prompts.

    ``fail_captions``: images whose caption call fails (HTTP 400); ``stand_in_answers``: the caption
    path's yes/no per statement for the stand-in caption "A photo." (xr_failed_caption=stand-in)."""
    inner = responder(root, malformed=False)
    names = _image_names(root)
    statements = {"The dress is red": 0, "The dress has sleeves": 1, **QUESTIONS}

    def image_of(body) -> str | None:
        for m in body["messages"]:
            for p in m["content"] if isinstance(m["content"], list) else []:
                if p["type"] == "image_url":
                    data = base64.b64decode(p["image_url"]["url"].split(",", 1)[1])
                    return names[hashlib.sha256(data).hexdigest()]
        return None

    def reply(req):
        body = req.json
        m = body["messages"][0]["content"]
        prompt = (m if isinstance(m, str) else " ".join(p.get("text", "") for p in m)).strip()
        if prompt.startswith("Answer the question with Yes or No. "):
            j = statements[prompt[len("Answer the question with Yes or No. "):]]
            img = image_of(body)
            return Reply.chat("Yes, it is." if VISION_ANSWERS[img][j] else "No.")
        if "Is this statement true for the image the caption describes?" in prompt:
            cap = re.search(r"caption of an image:\n(.+)\n", prompt).group(1)
            j = statements[prompt.split("describes?\n", 1)[1].split("\n", 1)[0]]
            yes = stand_in_answers[j] if cap == "A photo." else TEXT_ANSWERS[cap][j]
            return Reply.chat("Yes" if yes else "No")
        if prompt.startswith("Describe this image") and image_of(body) in fail_captions:
            return Reply.error(400, "caption refused")
        if prompt.startswith("FAKE-CAPTION-PROMPT"):
            img = image_of(body)
            return Reply.chat("capr" if img == "ref" else f"cap{img[1]}")
        if prompt.startswith("FAKE-REASONER"):
            assert "instruction=make it red;" in prompt and "ref=capr." in prompt
            return Reply.chat('Reasoning...\n```json\n{"step1": [["Color", "grey to red"], ["Keep", "the shape"]], '
                              '"step2": ["ct", "cv"]}\n```')
        if prompt.startswith("FAKE-QUESTIONS"):
            assert "atomic=\n   (1) Color: grey to red\n   (2) Keep: the shape\n." in prompt
            return Reply.chat(json.dumps({"step2": [["Is the dress red?", "True"],
                                                    ["Does the dress have sleeves?", "False"], ["not a pair"]]}))
        return inner(req)

    return reply


def prompt_of(body) -> str:
    """The text of a chat request's first message (its text parts joined), stripped."""
    m = body["messages"][0]["content"]
    return (m if isinstance(m, str) else " ".join(p.get("text", "") for p in m)).strip()


#: The optional official files (cir-v2 reasoner, caption rewriter), invented texts with the official placeholders.
OPTIONAL_PROMPTS = {
    "prompt1_stage1_reasoner_v2.txt": "FAKE-V2 instruction=[[INSTRUCTION]]; ref=[[REF_IMAGE_DESC]].",
    "prompt1_stage1_rewriter.txt": "FAKE-REWRITER q={user_query} d={detail_json_str}",
}


def official_checkout(tmp_path, dataset="FashionIQ-dress", skip=(), extra=None):
    """A made-up checkout of the official repository: XR/prompts/<dataset>/ with invented prompt texts
    (``extra``: more files, e.g. :data:`OPTIONAL_PROMPTS`)."""
    d = tmp_path / "xr-checkout" / "XR" / "prompts" / dataset
    d.mkdir(parents=True)
    files = {"caption.txt": "FAKE-CAPTION-PROMPT: say what you see.",
             "prompt1_stage1_reasoner.txt": "FAKE-REASONER instruction=[[INSTRUCTION]]; ref=[[REF_IMAGE_DESC]].",
             "prompt2_stage2_reasoner.txt": "FAKE-QUESTIONS instruction=[[INSTRUCTION]]; atomic=[[ATOMIC_INST]].",
             **(extra or {})}
    for name, text in files.items():
        if name not in skip:
            (d / name).write_text(text)
    return tmp_path / "xr-checkout"
