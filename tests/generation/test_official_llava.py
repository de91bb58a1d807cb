"""LLaVA under ``official``: fp32 weights, one prompt per pass, UniRAG's hand-written prompt string."""

from __future__ import annotations

import pytest

from tiny_models import tiny_llava_dir
from unirag.generators.hf_vlm import profile_load_options
from unirag.pipelines.captioner import Captioner
from unirag.prompts.caption import build_caption_prompt, caption_template
from unirag.prompts.official import SYSTEM_SENTENCE, apply_caption_prompts
from unirag.retrieval.results import Pair

GEN = "castorini/UniRAG src/unirag/caption_generation_inference.py@e9a4e00"


def test_official_llava_loads_in_fp32_one_prompt_per_pass():
    """infer_llava (caption_generation_inference.py@e9a4e00:212-262): ``from_pretrained`` with no
    ``torch_dtype`` (:221-227: float32 weights), ``bs: int = 1`` (:219) and one slice of ``bs`` prompts per
    ``generate`` (:255-262). An explicit --dtype / --batch-size still wins."""
    official = profile_load_options("hf:llava-hf/llava-v1.6-vicuna-7b-hf", "official", {"dtype": "auto"})
    assert official == {"dtype": "float32", "batch_size": 1, "prompt_format": "official"}
    given = profile_load_options("hf:x", "official", {"dtype": "bfloat16", "batch_size": 8})
    assert (given["dtype"], given["batch_size"]) == ("bfloat16", 8)
    assert profile_load_options("hf:x", "default", {"dtype": "auto"}) == {"dtype": "auto",
                                                                       "prompt_format": "chat-template"}
    assert profile_load_options("openai:gpt-4o", "official", {}) == {}


@pytest.fixture(scope="module")
def llava_path():
    return tiny_llava_dir()


def _official_message(template: str, captions: list[str]) -> str:
    """prepare_llava_message (src/unirag/generator_prompt.py@07190083:16-32) on a list already cut to k:
    every line ends with a line break and the query line repeats the last example's number."""
    examples = "".join(f"Caption [{i}]: {c}\n" for i, c in enumerate(captions, start=1))
    examples += f"Caption [{len(captions)}]: ...\n"
    return template.format(examples=examples, image_num=len(captions) + 1, caption_num=len(captions))


def test_official_llava_prompt_is_the_hand_written_string(coco_set, llava_path, monkeypatch):
    """The text each LLaVA call receives: ``f"USER: <image>\\n{SYSTEM_MESSAGE}\\n{message}\\nASSISTANT:"``
    (caption_generation_inference.py@e9a4e00:250-251), not the processor's chat template."""
    rows = coco_set["rows"]
    root = coco_set["images_root"]
    shots = [Pair.of(root / rows[i]["image"], rows[i]["captions"][0]) for i in (1, 2)]
    captioner = Captioner(f"hf:{llava_path}", profile="official", device="cpu", max_tokens=3)
    backend = captioner.backend
    assert (backend.dtype, backend.batch_size, backend.prompt_format) == ("float32", 1, "official")
    seen: list[str] = []
    original = type(backend)._prompt_text

    def spy(self, conv, n_images):
        text = original(self, conv, n_images)
        seen.append(text)
        return text

    monkeypatch.setattr(type(backend), "_prompt_text", spy)
    captioner.caption(root / rows[0]["image"], shots)
    template = caption_template("llava").text("few_shot")  # the paper's Figure 3 = the official file's text
    token = backend._processor.image_token
    expected = f"USER: {token}\n{SYSTEM_SENTENCE}\n{_official_message(template, [s.caption for s in shots])}" \
               "\nASSISTANT:"
    assert seen == [expected]
    # --save-prompts writes the same text to NNN_qid.sent.txt (the official prompt_{idx}.txt, :247-250)
    assert captioner.sent_prompt(captioner.request(root / rows[0]["image"], shots).prompt) == expected

    default = Captioner(f"hf:{llava_path}", device="cpu", max_tokens=3)
    monkeypatch.setattr(type(default.backend), "_prompt_text", spy)
    seen.clear()
    default.caption(root / rows[0]["image"], shots)
    assert seen[0] != expected and default.backend.prompt_format == "chat-template"


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
