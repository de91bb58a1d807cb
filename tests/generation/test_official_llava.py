"""LLaVA under ``official``: fp32 weights, one prompt per pass, UniRAG's hand-written prompt string."""

from __future__ import annotations

import pytest

from tiny_models import tiny_llava_dir
from unirag.generators.registry import profile_options
from unirag.pipelines.captioner import Captioner
from unirag.profiles import resolve
from unirag.prompts.caption import build_caption_prompt, caption_template
from unirag.prompts.official import SYSTEM_SENTENCE, apply_caption_prompts
from unirag.retrieval.results import Pair

GEN = "castorini/UniRAG src/unirag/caption_generation_inference.py@e9a4e00"


def test_official_llava_loads_in_fp32_one_prompt_per_pass():
    """infer_llava (caption_generation_inference.py@e9a4e00:212-262): ``from_pretrained`` with no
    ``torch_dtype`` (:221-227: float32 weights), ``bs: int = 1`` (:219) and one slice of ``bs`` prompts per
    ``generate`` (:255-262). An explicit --dtype / --batch-size still wins."""
    official = profile_options("hf:llava-hf/llava-v1.6-vicuna-7b-hf", "official", {"dtype": "auto"})
    assert official == {"dtype": "float32", "batch_size": 1, "prompt_format": "official"}
    given = profile_options("hf:x", "official", {"dtype": "bfloat16", "batch_size": 8})
    assert (given["dtype"], given["batch_size"]) == ("bfloat16", 8)
    assert profile_options("hf:x", "default", {"dtype": "auto"}) == {"dtype": "auto",
                                                                       "prompt_format": "chat-template"}
    assert profile_options("openai:gpt-4o", "official", {}) == {}


@pytest.fixture(scope="module")
def llava_path():
    return tiny_llava_dir()


def _official_message(template: str, captions: list[str]) -> str:
    """prepare_llava_message (src/unirag/generator_prompt.py@07190083:16-32) on a list already cut to k:
    every line ends with a line break and the query line repeats the last example's number."""
    examples = "".join(f"Caption [{i}]: {c}\n" for i, c in enumerate(captions, start=1))
    examples += f"Caption [{len(captions)}]: ...\n"
    return template.format(examples=examples, image_num=len(captions) + 1, caption_num=len(captions))


#: A chat template that ends the user turn as llava-hf's LLaVA-1.5 processors do (text, a space, then
#: "ASSISTANT:"), unlike the official string's line break, so the two formats give different texts.
SPACE_TEMPLATE = ("{% for message in messages %}{{ message['role'].upper() }}: {% for item in message['content'] %}"
                  "{% if item['type'] == 'image' %}<image>\n{% endif %}{% endfor %}{% for item in message['content'] %}"
                  "{% if item['type'] == 'text' %}{{ item['text'] }} {% endif %}{% endfor %}{% endfor %}"
                  "{% if add_generation_prompt %}ASSISTANT:{% endif %}")


def test_official_llava_prompt_is_the_hand_written_string(coco_set, llava_path, monkeypatch):
    """The text each LLaVA call receives: ``f"USER: <image>\\n{SYSTEM_MESSAGE}\\n{message}\\nASSISTANT:"``
    (caption_generation_inference.py@e9a4e00:250-251), not the processor's chat template (here one that
    ends the turn with " ASSISTANT:", which the default profile then uses)."""
    rows = coco_set["rows"]
    root = coco_set["images_root"]
    shots = [Pair.of(root / rows[i]["image"], rows[i]["captions"][0]) for i in (1, 2)]
    captioner = Captioner(f"hf:{llava_path}", profile="official", device="cpu", max_tokens=3)
    backend = captioner.backend
    backend._load()  # loaded: its processor gets a chat template that differs from the official string
    backend._processor.chat_template = SPACE_TEMPLATE
    assert (backend.dtype, backend.batch_size, backend.prompt_format) == ("float32", 1, "official")
    seen: list[str] = []
    original = type(backend)._prompt

    def spy(self, messages):
        text, images = original(self, messages)
        seen.append(text)
        return text, images

    monkeypatch.setattr(type(backend), "_prompt", spy)
    captioner.caption(root / rows[0]["image"], shots)
    template = caption_template("llava").text("few_shot")  # the paper's Figure 3 = the official file's text
    token = backend._processor.image_token
    expected = f"USER: {token}\n{SYSTEM_SENTENCE}\n{_official_message(template, [s.caption for s in shots])}" \
               "\nASSISTANT:"
    assert seen == [expected]
    # --save-prompts writes the same text to NNN_qid.sent.txt (the official prompt_{idx}.txt, :247-250)
    assert captioner.sent_prompt(captioner.request(root / rows[0]["image"], shots).prompt) == expected

    # the official profile with only llava_prompt_format changed: the same words, the processor's format
    template = Captioner(f"hf:{llava_path}", device="cpu", max_tokens=3,
                         profile=resolve("official", llava_prompt_format="chat-template"))
    template.backend._load()
    template.backend._processor.chat_template = SPACE_TEMPLATE
    seen.clear()
    template.caption(root / rows[0]["image"], shots)
    assert seen == [expected.removesuffix("\nASSISTANT:") + " ASSISTANT:"]
    default = Captioner(f"hf:{llava_path}", device="cpu", max_tokens=3)
    assert default.backend.prompt_format == "chat-template"


def test_official_llava_numbering_repeats_k_and_keeps_the_line_break(coco_set):
    """generator_prompt.py@07190083:22-26: ``for index, hit in enumerate(...)`` over the k examples, then
    ``Caption [{index+1}]: ...`` - index is still the last example's, so the query line says [k]; every line
    ends with "\\n" (the packaged template names the query [k+1] and joins the lines)."""
    root, rows = coco_set["images_root"], coco_set["rows"]
    shots = [Pair.of(root / rows[i]["image"], rows[i]["captions"][0]) for i in (1, 2, 3)]
    tpl = caption_template("llava")
    official = apply_caption_prompts(tpl, "llava", "official")
    text = build_caption_prompt(official, root / rows[0]["image"], shots).messages[-1].parts[-1].text
    assert text == f"{SYSTEM_SENTENCE}\n" + _official_message(tpl.text("few_shot"), [s.caption for s in shots])
    paper = build_caption_prompt(tpl, root / rows[0]["image"], shots).messages[-1].parts[-1].text
    assert "Caption [4]: ..." in paper and "Caption [3]: ...\n" in text


class _Loaded(Exception):
    pass


def test_official_llava_weights_load_in_float32_on_a_gpu(monkeypatch, tmp_path):
    """infer_llava loads with ``LlavaNextForConditionalGeneration.from_pretrained(model_name)`` and no dtype
    (caption_generation_inference.py@e9a4e00:221-227): float32 weights, also on a GPU, where unirag's
    ``auto`` picks bfloat16. What ``from_pretrained`` is asked for, on a GPU as the runtime would resolve it."""
    import torch
    import transformers

    from unirag import runtime

    asked = []

    def model_from_pretrained(source, **kwargs):
        asked.append(kwargs.get("dtype", kwargs.get("torch_dtype")))
        raise _Loaded

    monkeypatch.setattr(runtime, "resolve_device", lambda device="auto": "cuda")
    monkeypatch.setattr(runtime, "device_map_kwargs", lambda device: {})
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    monkeypatch.setattr(transformers.AutoProcessor, "from_pretrained", lambda source, **kw: object())
    monkeypatch.setattr(transformers.AutoModelForImageTextToText, "from_pretrained", model_from_pretrained)
    for profile in ("official", "default"):
        with pytest.raises(_Loaded):
            Captioner(f"hf:{tmp_path}", profile=profile).backend._load()
    assert asked == [torch.float32, torch.bfloat16]


def test_official_llava_run_sends_one_prompt_per_generate(coco_set, llava_path, monkeypatch, tmp_path):
    """``for i in range(0, len(prompts), bs)`` with ``bs: int = 1`` (caption_generation_inference.py@e9a4e00:219,
    :255-262): one prompt per ``generate`` in a whole caption run; unirag's default batches 4."""
    from unirag.generators.hf_vlm import HFVisionLanguageGenerator
    from unirag.pipelines.caption import CaptionConfig, run_captioning

    sizes = []
    original = HFVisionLanguageGenerator.generate_batch

    def spy(self, batch, options=None):
        sizes.append(len(batch))
        return original(self, batch, options)

    monkeypatch.setattr(HFVisionLanguageGenerator, "generate_batch", spy)
    for profile in ("official", "default"):
        run_captioning(CaptionConfig(queries=coco_set["queries"], generator=f"hf:{llava_path}",
                                     out=tmp_path / profile, mode="rag", k=1, retrieval=coco_set["run"],
                                     images_root=coco_set["images_root"], limit=3, save_prompts=0, progress=False,
                                     profile=profile, max_tokens=2, generator_options={"device": "cpu"}))
    assert sizes == [1, 1, 1, 3]
