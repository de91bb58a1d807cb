"""The caption prompts as the official UniRAG code sends them (setting ``caption_prompts = official``).

The packaged templates follow the paper's Appendix A. The official code differs for Gemini in two
ways the issue tracker records (castorini/UniRAG ``src/unirag/caption_generation_inference.py`` at
commit 294f843a, ``infer_gemini``: the message is the prompt file's text alone, lines 58, 61 and 73,
with no ``SYSTEM_MESSAGE``, line 29, which GPT and LLaVA send, lines 139, 154 and 247):

* zero-shot: the generic system sentence of Figure 2 is not sent;
* few-shot: the prompt ends with "The answer must be compulsarily in one line." (sic).

Any other official wording is not printed in a paper, so unirag does not ship it: with
``official_prompts=DIR`` (``--official-prompts``) the instruction text of every family is read at
run time from the user's own checkout of castorini/UniRAG (``src/unirag/prompts/*.txt``), exactly
as the official ``generator_prompt.Prompt`` reads it (the whole file, stripped: ``generator_prompt.py``
at commit 07190083, line 15).
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

from unirag.errors import ConfigError
from unirag.prompts.templates import PromptTemplate

#: Figure 2's first sentence (the official ``SYSTEM_MESSAGE``), which the official Gemini path does not send.
SYSTEM_SENTENCE = ("You are an intelligent helpful assistant AI that is an expert in generating captions for "
                   "provided images.")
#: The last sentence of the official Gemini few-shot prompt (quoted in the issue; spelling as sent).
GEMINI_ONE_LINE = "The answer must be compulsarily in one line."
#: The official prompt files, per template family (few-shot) and shared (zero-shot).
ZERO_SHOT_FILE = "caption-prompt-without-examples.txt"
FEW_SHOT_FILES = {"gpt4o": "gpt-caption-prompt-with-examples.txt",
                  "gemini": "gemini-caption-prompt-with-examples.txt",
                  "llava": "llava-caption-prompt-with-examples.txt"}


def official_prompt_file(directory: str | Path, name: str) -> Path:
    """``name`` in a UniRAG checkout (its root, ``src/unirag`` or ``src/unirag/prompts``); a clear error if absent."""
    root = Path(directory).expanduser()
    if not root.is_dir():
        raise ConfigError(f"--official-prompts {root}: not a directory (give your checkout of castorini/UniRAG)")
    for candidate in (root / "src" / "unirag" / "prompts" / name, root / "prompts" / name, root / name):
        if candidate.is_file():
            return candidate
    raise ConfigError(f"--official-prompts {root}: no {name} (looked in src/unirag/prompts/, prompts/ and the "
                      "folder itself); point it at a checkout of github.com/castorini/UniRAG")


def apply_caption_prompts(tpl: PromptTemplate, family: str, wording: str,
                          official_prompts: str | Path | None = None) -> PromptTemplate:
    """``tpl`` with the ``caption_prompts`` setting applied (``paper``: unchanged)."""
    if wording == "paper":
        if official_prompts is not None:
            raise ConfigError("--official-prompts is used with --set caption_prompts=official (or --profile official)")
        return tpl
    sections = dict(tpl.sections)
    sources: list[str] = []
    if official_prompts is not None:
        if family not in FEW_SHOT_FILES:
            raise ConfigError(f"--official-prompts: the official code has no prompt for template family {family!r}")
        zero, few = (official_prompt_file(official_prompts, n) for n in (ZERO_SHOT_FILE, FEW_SHOT_FILES[family]))
        # as generator_prompt.Prompt: "".join(readlines()).strip()
        sections["zero_shot"], sections["few_shot"] = (p.read_text(encoding="utf-8").strip() for p in (zero, few))
        sources = [str(zero), str(few)]
    elif family == "gemini":
        sections["zero_shot"] = sections.get("zero_shot", "").strip().removeprefix(SYSTEM_SENTENCE).lstrip()
        # the sentence ends the file's last line, after one space (gemini-caption-prompt-with-examples.txt@6c4eda29:5)
        sections["few_shot"] = sections.get("few_shot", "").rstrip() + " " + GEMINI_ONE_LINE
    elif family != "llava":
        return tpl  # the other families' official wording is the paper's (or comes from --official-prompts)
    if family == "llava":
        # prepare_llava_message (castorini/UniRAG src/unirag/generator_prompt.py@07190083:16-32): each example
        # line ends with "\n" and so does the query line, numbered index + 1 of the *last example* (the list
        # is already cut to k, get_rag_fewshot_examples :138-140), i.e. [k] again.
        sections["query_caption"] = "Caption [{caption_num}]: ..."
        sections["few_shot"] = sections.get("few_shot", "").replace("{examples}", "{examples}\n")
    blob = "\n".join(f"### {k}\n{v}" for k, v in sections.items()) + "\n" + "\n".join(sources)
    return replace(tpl, name=f"{tpl.name}+official", sections=sections,
                   sha256=hashlib.sha256(blob.encode("utf-8")).hexdigest())
