"""Behaviour settings and the profiles that name sets of them, kept in one place.

Where the papers and their official code disagree, unirag implements both behaviours and names each
choice as one :class:`Setting` (``xr_scoring = paper | official``, ``pair_completion = pool | uniir``,
...). A *profile* is nothing more than a named set of setting values:

* ``default``: the papers as written plus unirag's documented fixes;
* ``official``: the official code's behaviour, bugs included where the official code has one (such
  settings carry ``official_bug``, and the manifest and docs say so).

Code never asks which profile is active; it reads the setting it depends on::

    settings = resolve("official", temperature="0.2")
    settings["xr_scoring"]          # "official"
    settings.to_dict()              # {"profile": "official", "settings": {...}, "overrides": [...]}

Every run manifest records ``settings.to_dict()``. A user may set any one setting alone on top of a
profile, by the same name everywhere: ``--set NAME=VALUE`` on the command line, ``settings:`` in a grid
file, a keyword of :func:`resolve` in the Python API. :func:`split_settings` is the one reader of such
names for all three (it also routes the example-selection names of :class:`unirag.Selection`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from unirag.errors import ConfigError

PROFILES = ("default", "official")


@dataclass(frozen=True)
class Setting:
    """One behaviour choice: its name, the allowed values, and its value in each profile."""

    name: str
    default: Any
    official: Any
    help: str
    #: the allowed values (``None``: any value ``parse`` reads; without ``parse``: the two profiles' values)
    choices: tuple[Any, ...] | None = None
    #: turns a CLI/YAML string into a value (``None``: the string itself, checked against choices)
    parse: Callable[[str], Any] | None = None
    #: the official file (and line) the ``official`` value follows, e.g. ``"TIGER-AI-Lab/UniIR src/...py:120"``
    cite: str = ""
    #: the official behaviour is a known bug that ``official`` reproduces on purpose
    official_bug: bool = False

    def __post_init__(self) -> None:
        if self.choices is None and self.parse is None:
            object.__setattr__(self, "choices", (self.default, self.official))

    def coerce(self, value: Any) -> Any:
        """Check (and, for strings, parse) a value given by a user for this setting."""
        if isinstance(value, str) and self.parse is not None:
            try:
                value = self.parse(value)
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"setting {self.name!r}: cannot read {value!r} ({exc})") from None
        if self.choices is not None and value not in self.choices:
            known = ", ".join(str(c) for c in self.choices)
            raise ConfigError(f"setting {self.name!r} must be one of {known}; got {value!r}")
        return value


#: Where the ``official`` values come from (the ``cite`` of each row names the file and line).
_XR = "01yzzyu/xr.github.io "
_GEN_CAP = "castorini/UniRAG src/unirag/caption_generation_inference.py@e9a4e00"
_EVAL_CAP = "castorini/UniRAG src/unirag/eval_caption_generation.py@e9a4e00"
_EVAL_IMG = "castorini/UniRAG src/unirag/eval_image_generation.py@e9a4e00"


def _or_none(parse: Callable[[str], Any], text: str, nones: tuple[str, ...] = ("none", "")) -> Any:
    """A setting's value read from text: ``None`` for one of ``nones`` (any case), else ``parse(text)``."""
    return None if text.strip().lower() in nones else parse(text.strip())


def _on_off(text: str) -> bool:
    value = text.strip().lower()
    if value in ("on", "true", "yes", "1"):
        return True
    if value in ("off", "false", "no", "0"):
        return False
    raise ValueError("expected on or off")


def _temperature(text: str) -> float | None:
    """``none`` (send no temperature: the provider's or model's default) or a number >= 0."""
    value = _or_none(float, text, ("none", "null", "default"))
    if value is not None and value < 0:
        raise ValueError("a temperature is >= 0")
    return value


#: Every behaviour setting, by name. Each area adds its rows here (this is the one place).
_ROWS = (  # rows by area; keep each row's help and cite precise
    # --- image inputs (the one loader, unirag.data.images.load_rgb; issue 16) -------------------------
    # Not paper-vs-code differences: both profiles share the value; the rows name the choice and its
    # default so the loader, the import check, the index build and the server agree on it.
    Setting("image_max_pixels", default=40_000_000, official=40_000_000, parse=int,
            help="Most pixels (width x height) an image may declare in its header; bigger ones are refused "
                 "as decompression bombs before decoding (an index build skips and lists them). The server's "
                 "--max-pixels default."),
    Setting("image_background", default="white", official="white", choices=("white", "black"),
            help="What transparent pixels are composited on when an image is made RGB. 'black' reproduces a "
                 "plain PIL convert('RGB'), which turns a transparent background black."),
    Setting("image_loading", "normalised", "plain",
            "How caption and image runs turn the query and example images into RGB. normalised: EXIF "
            "rotation applied, transparency composited on image_background, 16-bit and float pixels scaled "
            "(unirag.data.images.load_rgb); plain: Image.open(path).convert('RGB') as the official code, "
            "nothing else (a rotated photo stays as stored)",
            cite="castorini/UniRAG src/unirag/caption_generation_inference.py@e9a4e00:66-74 (fewshot and query "
                 "images opened as stored), src/unirag/generator_prompt.py@07190083:50-88 (merge_images: "
                 "Image.open, pasted on RGB)"),

    # --- index builds (issue 29) -----------------------------------------------------------------------
    # Not a paper-vs-code difference either: one named guard shared by every way an index is built.
    Setting("index_max_shrink", default=0.10, official=0.10, parse=float,
            help="Largest fraction of a modality's candidates a rebuild may lose before it is refused and the "
                 "old index kept (a modality lost entirely is always refused): a vanished image folder must "
                 "not silently turn an index text-only. --allow-shrink (allow_shrink=True) replaces it anyway."),

    # --- X^R (issue 15) ---
    # The official X^R code is 01yzzyu/xr.github.io, XR/ (commit cf44a37); cites name the file and the
    # line(s) the official value follows (with the function or argparse option). docs/xr-parity.md explains
    # each row.

    Setting("xr_scoring", "paper", "official",
            "X^R coarse similarity. paper: S^t = s_t^t + s_v^t and S^v = s_t^v + s_v^v, one per imagined "
            "caption (paper Alg. 1 lines 8-9); official: each target description scores (1 - tau) "
            "sim(description, image) + tau sim(description, caption), tau = 0.15, averaged over descriptions",
            cite=_XR + "XR/utils/inference_entrypoint_ray.py:942-946, :957-959 (clip_rank_retrieval_ray); "
                       "XR/xr.py:1560 (--tau 0.15)"),
    Setting("xr_stage2_source", "rrf", "aug",
            "which stage-1 list feeds fine filtering (and is the xr_coarse ranking). rrf: reciprocal rank "
            "fusion of the per-description lists (paper Alg. 1 line 10); aug: the list ranked by the "
            "description-averaged similarity (official; its RRF list is computed but unused)",
            cite=_XR + "XR/xr.py:563-577 (stage1_retrieve picks the list), "
                       ":1545 (--stage2_source default 'aug')"),
    Setting("xr_rerank", "paper", "official",
            "fine-filtering score. paper: (S_q^t + S_q^v) x (lambda norm(S^t) + (1 - lambda) norm(S^v)) "
            "(Alg. 1 line 15); official: (0.5 S_q^v + 0.5 S_q^t) x min-max(stage-1 similarity of the "
            "stage-2 list over the top-k')",
            cite=_XR + "XR/xr.py:932-947 (_take_head), :970-993 (_do_single_rerank, "
                       "_do_fusion_rerank)"),
    Setting("xr_minmax_ties", "one", "zero",
            "min-max normalisation of k' equal scores: one (unirag: a tie never zeroes the product) or "
            "zero (official: every candidate then scores 0)",
            cite=_XR + "XR/xr.py:939-945 (_take_head)"),
    Setting("xr_questions", "batch", "single",
            "verification calls. batch: one call per candidate with every statement (unirag); single: one "
            "yes/no call per statement ('Answer the question with Yes or No.' on the image)",
            cite=_XR + "XR/xr.py:742 (_run_qa_path), :811-836 (_run_caption_path)"),
    Setting("xr_max_statements", 5, None,
            "statements the question agent may write (none: no cap, as the official --s2_num_questions)",
            parse=partial(_or_none, int),
            cite=_XR + "XR/xr.py:1557 (--s2_num_questions default None), :713-719"),
    Setting("xr_caption_verifier", "fixed", "bool-bug",
            "expected answers on the caption path. fixed: as the question agent wrote them; bool-bug: "
            "official bool(answer as written): bool(\"False\") is True, so every answer the stage-2 reasoner "
            "writes as a string counts as True (official bug; JSON false stays false)",
            official_bug=True,
            cite=_XR + "XR/xr.py:836, :881 (_run_caption_path: bool(q_ans))"),
    Setting("xr_prompts", "unirag", "official",
            "agent prompts. unirag: the packaged prompts (paper roles, both imagination agents); official: "
            "the official per-dataset caption, stage-1 reasoner and stage-2 reasoner prompts read from the "
            "user's checkout (--official-prompts DIR) with their reply formats; no vision imagination agent",
            cite=_XR + "XR/xr.py:66-83 (load_prompt), :253-260 (stage1_reason), "
                       ":650-663 (stage2_verify)"),
    Setting("xr_encoder", None, "laion/CLIP-ViT-B-32-laion2B-s34B-b79K",
            "cross-modal encoder when the config names none (none: the offline default)",
            parse=partial(_or_none, str), cite=_XR + "XR/xr.py:1536 (--clip_path)"),
    Setting("xr_agent_model", None, "hf:OpenGVLab/InternVL3-8B",
            "model of every agent role when the config names none (none: no agents, embedding baseline)",
            parse=partial(_or_none, str),
            cite=_XR + "XR/xr.py:1532-1534 (--llm_path, --mllm_path, --img_cap_model_path)"),
    Setting("xr_max_new_tokens", 400, 2048,
            "max new tokens of an agent call when its role sets none (captions: xr_caption_max_new_tokens)",
            parse=int, cite=_XR + "XR/utils/inference_entrypoint_ray.py:153 (llm_load_and_inference_ray), "
                                  ":256-262 (mllm_load_and_inference_ray): max_tokens=2048"),
    Setting("xr_caption_max_new_tokens", 400, 256,
            "max new tokens of a caption call when the caption role sets none",
            parse=int, cite=_XR + "XR/utils/inference_entrypoint_ray.py:741-747 (mllm_inference_for_caption_ray: "
                                  "max_tokens=256)"),
    Setting("xr_json_parsing", "unirag", "official",
            "how the JSON replies of the official prompts (stage-1 reasoner, cir-v2 reasoner, stage-2 reasoner) "
            "are read. unirag: the whole reply, a code fence or the first balanced {...}, light repairs, and "
            "the reply is asked for again (json_attempts); official: the ```json fence, else the first {...} up "
            "to the first '}', one json_repair.repair_json pass, never asked again (no JSON: the official "
            "stand-in)",
            cite=_XR + "XR/xr.py:295-314 (stage1_reason), :341-357 (cir-v2), "
                       ":689-721 (stage2_verify)"),
    Setting("xr_caption_repetition_penalty", None, 1.05,
            "repetition penalty of the caption calls when the caption role sets none (none: send none). Sent "
            "as the hf generate() keyword and as an extra body field to OpenAI-compatible servers (vLLM); "
            "Gemini has no such parameter",
            parse=partial(_or_none, float),
            cite=_XR + "XR/utils/inference_entrypoint_ray.py:741-747 (mllm_inference_for_caption_ray SamplingParams)"),
    Setting("xr_answer_matching", "boolean", "exact-string",
            "how a yes/no reply on the image path is compared with the expected answer. boolean: the expected "
            "answer read as true/false (JSON booleans, or true/false/yes/no in any case); exact-string: as the "
            "official code, the reply's 'True'/'False' must equal the answer as the stage-2 reasoner wrote it "
            "(only the strings \"True\" and \"False\" can match; JSON true/false or \"yes\" never do)",
            cite=_XR + "XR/xr.py:793-795 (_run_qa_path)"),
    Setting("xr_stage1_schema", "v1", "both",
            "stage-1 reasoner outputs. v1: step1/step2 only; both: also the cir-v2 structured reply of "
            "prompt1_stage1_reasoner_v2.txt (when the checkout has it; official: run when present), the input "
            "of the caption rewriter",
            cite=_XR + "XR/xr.py:1551 (--stage1_schema default 'both'), :72-76 (optional file), :317-357"),
    Setting("xr_rewrite_caption", False, True,
            "rewrite one target caption from the cir-v2 reply with prompt1_stage1_rewriter.txt (when present) "
            "and add it to the 'aug' list of target descriptions (official: --stage1_rewrite_caption is "
            "store_true with default True, so always on)",
            parse=_on_off, choices=(False, True),
            cite=_XR + "XR/xr.py:1554 (--stage1_rewrite_caption default True), :86-89 (optional file), "
                       ":361-362, :369-418 (stage1_rewrite_caption), :455-458 ('aug' = v1 + caption)"),
    Setting("xr_query_text", "paper", "official",
            "query texts read from the annotations. paper: FashionIQ's two captions each stripped of "
            "whitespace and '.?, ', an empty one dropped, joined by ' and ' (CLIP4Cir / CIReVL); CIRR's caption "
            "as written. official: as the official loaders, FashionIQ strips only '.? ' from each of the first "
            "two captions and always joins them ('a and ' when the second is empty); CIRR strips whitespace and "
            "an empty caption becomes 'the same image'",
            cite=_XR + "XR/utils/data.py:130 (load_FashionIQ), :82-88 (load_CIRR extract_ref_instruct_tgt)"),
    Setting("xr_cirr_val_limit", None, 2400,
            "queries read from CIRR's validation file (cap.rc2.val.json): none: all of them; 2400: only the "
            "first 2400, as the official loader ('only for testing'); other files are never cut",
            parse=partial(_or_none, int), choices=(None, 2400),
            cite=_XR + "XR/utils/data.py:99 (load_CIRR: val_data[:2400])"),
    Setting("xr_cirr_reference", "exclude", "keep",
            "CIRR's reference image in the gallery a query ranks. exclude: removed (the CIRR protocol, CLIP4Cir); "
            "keep: ranked with the rest, as the official X^R code scores and submits the full list (an explicit "
            "exclude_reference / --exclude-reference still wins)",
            cite=_XR + "XR/xr.py:612-623 (_eval_and_log ranks over every gallery image), :1297-1300 (test submission "
                       "from the same list); XR/utils/data.py:77-95 (load_CIRR keeps the reference)"),
    Setting("xr_cirr_subset", "cut", "rerank",
            "How R_subset is ranked. cut: the full ranking restricted to the query's img_set members (reference "
            "removed); rerank: a separate pass over only those members (reference removed) with k' = the set's "
            "size - 1, whose coarse and fine stages rank them, as the official --subset run does",
            cite=_XR + "XR/xr.py:50-53 (--subset: top_k = len(img_set) - 1), :588-610 (stage-1 list cut to the "
                       "members, reference skipped, re-sorted), :1571 (--subset)"),
    Setting("xr_failed_caption", "skip", "stand-in",
            "a top-k' candidate whose caption call failed, on the caption path. skip: no caption-path call, "
            "its caption score is 0; stand-in: judged on the caption 'A photo.' (the official default of a "
            "missing caption)",
            cite=_XR + "XR/xr.py:831 (_run_caption_path: image_caption_dict.get(cand_name, 'A photo.'))"),

    # --- caption case (issue 15) ---------------------------------------------------------------
    Setting("caption_lowercase", "none", "gpt4o",
            "Captions lower-cased as they come back. none: as generated; gpt4o: the GPT-4o family's "
            "(OpenAI chat) captions, as the official UniRAG code lower-cases every GPT reply (Gemini and "
            "LLaVA captions keep their case); all: every generator's.",
            choices=("none", "gpt4o", "all"),
            cite="castorini/UniRAG@294f843 src/unirag/caption_generation_inference.py:179-183 (infer_gpt: "
                 "response.choices[0].message.content.lower()); :85 infer_gemini keeps response.text"),

    # --- retrieval, generation, metrics (issue 15) ----------------------------------------------------

    Setting("pair_completion", "pool", "uniir",
            "How a retrieved single-modality candidate is completed into an image-caption pair. pool: the "
            "pool's own pairing (same source item), else a search with the candidate's stored vector over "
            "the opposite modality. uniir: re-encode the candidate as an instructed M-BEIR query (MSCOCO "
            "task 0 text->image / task 3 image->text instruction, for every dataset) and take the first "
            "hit of the opposite modality in its top 10 whose image path / text differs from the query's.",
            cite="TIGER-AI-Lab/UniIR src/common/mbeir_retriever.py@72871c19:235-304 (get_raw_retrieved_candidates; "
                 "retrieve(k=10) :277, acceptance :288-298); "
                 "src/common/interactive_retriever.py@1104db5c:40 (dataset_id 9), :84/:93 (task_id 0/3)"),
    Setting("example_pairs", "per-candidate", "per-hit",
            "Which pairs become few-shot examples. per-candidate: one pair per distinct candidate, the "
            "search widened until k pairs are found. per-hit: each of the hits UniIR saved (its top 10; 50 "
            "for Fashion200k) becomes a pair with its complement, an image may repeat, the first k that do "
            "not show the query.",
            cite="castorini/UniRAG src/unirag/incontext_example_provider.py@07190083:10-45 (get_candidates); "
                 "src/unirag/generator_prompt.py@07190083:20,60,100 (min(k, len)); hits read: UniIR "
                 "src/common/mbeir_retriever.py@72871c19:412 with configs_scripts/large/eval/unirag/"
                 "retrieval.yaml@98dc570c:39-40,45-46 (10 for MSCOCO, 50 for Fashion200k)"),
    Setting("pair_alignment", "fixed", "uniir-zip",
            "With example_pairs = per-hit: which complement each hit is paired with. fixed: its own. uniir-zip: as "
            "the official code, complements exist for text and image hits only and are zipped against all hits, so "
            "after an image+text hit later hits get the next hit's complement and the last hits are dropped "
            "(official bug)",
            official_bug=True,
            cite="TIGER-AI-Lab/UniIR src/common/mbeir_retriever.py@98dc570:264-278, :289-308 (complements of text/"
                 "image hits only); castorini/UniRAG src/unirag/incontext_example_provider.py@07190083:11-13 "
                 "(zip(candidates, complement_candidates))"),
    Setting("rag_modality", "any", "task",
            "Which candidates rag examples are retrieved from when they come from an index (not a run file). "
            "any: every modality of the pool (unirag). task: the modality the task's examples supply, as "
            "UniRAG reads UniIR's per-task candidates: captioning searches captions (task 3, image->text), "
            "image generation searches images (task 0, text->image). Without it a per-hit caption search "
            "starts from the query photo and its look-alikes, which per-hit pairing then drops.",
            cite="castorini/UniRAG scripts/caption_generation.sh@e9a4e00:14 (mbeir_mscoco_task3_..._retrieved.jsonl), "
                 ":64 (fashion200k_task3); scripts/prepare_dataset.sh@e9a4e00:9, :18, :25 (task0 runs for images); "
                 "src/unirag/incontext_example_provider.py@07190083:9-44 (get_candidates)"),
    Setting("temperature", 0.0, None,
            "Sampling temperature sent to caption generators (GPT-4o, Gemini, LLaVA). none: send none "
            "(the provider's / model's default), as the official code does.",
            parse=_temperature,
            cite="castorini/UniRAG src/unirag/caption_generation_inference.py@294f843a:79-82 (infer_gemini), "
                 ":174-178 (infer_gpt), :258 (infer_llava): no temperature argument"),
    Setting("caption_prompts", "paper", "official",
            "Caption prompt wording. paper: the paper's Appendix A figures (Gemini's zero-shot prompt "
            "carries the generic system sentence). official: as the official code sends it: Gemini's "
            "zero-shot prompt without the system sentence and its few-shot prompt ending with 'The answer "
            "must be compulsarily in one line.'; with --official-prompts DIR, every family's instruction "
            "text is read from that checkout of castorini/UniRAG.",
            cite="castorini/UniRAG src/unirag/caption_generation_inference.py@294f843a:29 (SYSTEM_MESSAGE, sent "
                 "at :139/:154/:247 by GPT and LLaVA only), :58/:61/:73 (infer_gemini sends the prompt file alone); "
                 "src/unirag/prompts/gemini-caption-prompt-with-examples.txt@6c4eda29"),
    Setting("emu2_sampling", "unirag", "official",
            "Emu2-Gen sampling when --steps/--guidance are not given. unirag: 25 steps, guidance 4.0 (the "
            "LaVIT settings, for comparable runs). official: the Emu2-Gen pipeline's defaults, 50 steps, "
            "guidance 3.0, 1024x1024.",
            cite="castorini/UniRAG src/unirag/image_generation_inference.py@916425f8:139 (pipe(prompts): the "
                 "pipeline's defaults); baaivision/Emu Emu2/demo/backend/hf_model/emu/diffusion.py@48615f5d:151-157 "
                 "(the same defaults; BAAI/Emu2-Gen's pipeline_emu2_gen.py is not in the code index)"),

    # --- generated pictures (issue 25: ``--seed`` chooses examples on every command) ------------------
    Setting("image_seed", default=1234, official=1234, parse=int,
            help="Seed of every generated picture, the same for every query (the paper's LaVIT run: 1234). "
                 "Not the seed of the random example choice, which is --seed (grid option seed)."),
    Setting("image_top1", "first-pair", "top-candidate",
            "The retrieval:top1 image baseline. first-pair: the image of the first example pair kept for the query; "
            "top-candidate: the top retrieved candidate's own image, else its complement's image, else a 224x224 "
            "image of random noise, as the official retriever metrics",
            cite="castorini/UniRAG src/unirag/eval_image_generation.py@e9a4e00:108-140 (load_retrieved_images: "
                 "candidates[0]['img_path'], else complement_candidates[0]['img_path'], else noise)"),
    Setting("image_seeding", "unirag", "official",
            "How local image models are seeded. unirag: Emu2-Gen's torch generator is seeded with the "
            "image_seed setting before every call (each picture reproducible alone); LaVIT once, when it is built. "
            "official: Emu2-Gen is never seeded (UniRAG sets no seed around infer_emu2); LaVIT is seeded with 1234 "
            "before the first of every 1,000 queries, as the official script rebuilds (and reseeds) the model "
            "for each --index batch of 1,000",
            cite="castorini/UniRAG src/unirag/image_generation_inference.py@e9a4e00:27-30 (build_lavit_model seeds "
                 "1234), :100-148 (infer_emu2: no seed); scripts/image_generation.sh@e9a4e00:3, :19-21 (bs=1000, one "
                 "process per --index batch)"),

    # --- UniIR encoders (issue 27, point 9) -------------------------------------------------------------
    Setting("uniir_precision", "unirag", "official",
            "Precision of a UniIR encoder (uniir: specs) when --dtype is auto. unirag: bfloat16 (float16) weights "
            "on a GPU; official: float32 weights run under float16 autocast on CUDA, as UniIR embeds (on a CPU, "
            "float32 either way)",
            cite="TIGER-AI-Lab/UniIR src/models/uniir_clip/clip_scorefusion/configs_scripts/large/eval/unirag/"
                 "embed.yaml@98dc570:77 (use_fp16: true); src/common/mbeir_embedder.py@98dc570:52-53, :138-139 "
                 "(with autocast(enabled=use_fp16))"),

    # --- LLaVA (issue 27) -------------------------------------------------------------------------------
    Setting("hf_vlm_runtime", "unirag", "official",
            "How an hf: caption model loads when --dtype is auto and --batch-size is not given. unirag: bfloat16 "
            "(float16) on a GPU, 4 prompts per forward pass; official: float32 weights (from_pretrained with no "
            "dtype) and one prompt per pass, as infer_llava",
            cite=_GEN_CAP + ":221-227 (LlavaNextForConditionalGeneration.from_pretrained: no torch_dtype), :219 "
                            "(bs: int = 1), :255-262"),
    Setting("llava_prompt_format", "chat-template", "official",
            "The text an hf: LLaVA-family model receives. chat-template: the processor's own chat template; "
            "official: the hand-written 'USER: <image>\\n{system}\\n{message}\\nASSISTANT:' of infer_llava",
            cite=_GEN_CAP + ":250-251 (prompts.append(f\"USER: <image>\\n{SYSTEM_MESSAGE}\\n{message}\\nASSISTANT:\"))"),

    # --- caption scoring (issue 27) -----------------------------------------------------------------
    Setting("caption_failed", "exclude", "empty",
            "A caption query whose generator call failed, when the run is scored. exclude: left out and counted; "
            "empty: scored as an empty caption, as the official GPT and Gemini loops store \"\" for a call that "
            "raised (so the failure lowers every metric)",
            cite=_GEN_CAP + ":90-92 (infer_gemini: output = \"\"), :189-200 (infer_gpt: output = \"\" after "
                            "MAX_RETRY or a policy refusal)"),
    Setting("caption_prefix_strip", "labels", "official",
            "What is stripped from a caption before scoring. labels: unirag's answer labels (Caption/Answer/"
            "Output/..., with or without a number, bold, quotes; see unirag.metrics.text_normalize); official: "
            "only a leading 'Caption [n]: ' (exactly the regex ^Caption \\[\\d+\\]: after str.strip())",
            cite=_EVAL_CAP + ":59-65 (remove_caption_prefix), :77-79 (get_results)"),

    # --- image metrics and image runs (issue 27) -----------------------------------------------------

    Setting("image_metric_channels", "rgb", "bgr",
            "Channel order the images reach FID, CLIP Score and IS in. rgb: decoded as RGB; bgr: as OpenCV's "
            "imread returns them, never converted (official bug: the networks expect RGB)",
            official_bug=True,
            cite=_EVAL_IMG + ":98 (load_images: cv2.imread), :119, :130 (load_retrieved_images)"),
    Setting("image_metric_size", None, 224,
            "Size every image is resized to (cv2.resize, bilinear, square) before FID and CLIP Score; "
            "Inception Score resizes that image again to 299x299. none: the stored size (the Inception "
            "network and the CLIP processor resize themselves)",
            parse=partial(_or_none, int, nones=("none", "stored", "")), choices=(None, 224),
            cite=_EVAL_IMG + ":99 (cv2.resize(img, (224, 224))), :173 (calculate_inception_score: 299x299)"),
    Setting("image_metric_missing", "exclude", "noise",
            "A query without a generated image (failed) or without a real image. exclude: left out and counted; "
            "noise: scored as a 224x224 image of uniform random pixels (drawn from --seed; the official draw is "
            "unseeded)",
            cite=_EVAL_IMG + ":96-104 (load_images: np.random.randint(256, size=(224, 224, 3)))"),
    Setting("image_format", "png", "jpeg",
            "File format of generated images. png: lossless; jpeg: PIL's default JPEG quality (75), as the "
            "official run saved them",
            cite="castorini/UniRAG src/unirag/image_generation_inference.py@e9a4e00:82-85 (infer_lavit), :143-146 "
                 "(infer_emu2): image.save(f'{qid}_....jpg')"),
)
SETTINGS: dict[str, Setting] = {s.name: s for s in _ROWS}  # one row per name: tests/profiles checks it


@dataclass(frozen=True)
class Settings(Mapping[str, Any]):
    """The resolved value of every setting for one run: a profile plus the user's overrides."""

    profile: str
    values: Mapping[str, Any]
    overrides: tuple[str, ...] = field(default=())

    def __getitem__(self, name: str) -> Any:
        try:
            return self.values[name]
        except KeyError:
            raise KeyError(f"unknown setting {name!r}; known: {', '.join(sorted(self.values))}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.values)

    def __len__(self) -> int:
        return len(self.values)

    def official_bugs(self) -> list[str]:
        """Settings whose value reproduces a known bug of the official code."""
        return sorted(n for n, v in self.values.items()
                      if SETTINGS[n].official_bug and v == SETTINGS[n].official and v != SETTINGS[n].default)

    def to_dict(self) -> dict[str, Any]:
        """What a run manifest records."""
        out: dict[str, Any] = {"profile": self.profile, "settings": dict(self.values),
                               "overrides": list(self.overrides)}
        bugs = self.official_bugs()
        if bugs:
            out["reproduces_official_bugs"] = bugs
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Settings:
        """Settings from a manifest's ``to_dict()``: the profile, with the recorded overrides."""
        recorded = data.get("settings", {})
        names = tuple(n for n in data.get("overrides", []) if n in recorded)
        return resolve(cls(data.get("profile") or "default", recorded, names))  # a recorded None stays None


def resolve(profile: str | Settings | None = "default", **overrides: Any) -> Settings:
    """The settings of ``profile`` with ``overrides`` (``None`` values are ignored: option not given)."""
    if isinstance(profile, Settings):
        base, given = profile.profile, {n: profile.values[n] for n in profile.overrides}
    else:
        base, given = profile or "default", {}
    if base not in PROFILES:
        raise ConfigError(f"unknown profile {base!r}; known: {', '.join(PROFILES)}")
    given.update({k: v for k, v in overrides.items() if v is not None})
    unknown = sorted(set(given) - set(SETTINGS))
    if unknown:
        raise ConfigError(f"unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(SETTINGS))}")
    values = {name: s.official if base == "official" else s.default for name, s in SETTINGS.items()}
    for name, value in given.items():
        values[name] = SETTINGS[name].coerce(value)
    return Settings(base, values, tuple(sorted(given)))


def read_assignments(items: Iterable[str], option: str = "--set") -> list[tuple[str, str]]:
    """``NAME=VALUE`` strings (``--set``, in order) -> ``(name, value)`` pairs; the value stays a string,
    read later by its setting's declared type."""
    pairs = []
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"{option} expects NAME=VALUE, got {item!r}")
        pairs.append((name.strip(), value.strip()))
    return pairs


#: The example-selection names that ``--set NAME=VALUE`` and a grid's ``settings:`` take beside the
#: settings table -> (the :meth:`unirag.Selection.of` keyword it sets, how a string value is read,
#: whether repeated values collect into a list); read by
#: :func:`unirag.retrieval.selection.selection_from_settings`.
SELECTION_NAMES: dict[str, tuple[str, Callable[[str], Any], bool]] = {
    "diversity": ("diversity", str, False),  # none | mmr
    "mmr_lambda": ("mmr_lambda", float, False),
    "one_per_image": ("one_per_image", _on_off, False),  # on | off
    "near_duplicates": ("near_duplicates", str, False),  # off | report | exclude
    "hash_threshold": ("image_hash", int, False),
    "cosine_threshold": ("image_cosine", partial(_or_none, float), False),  # a number, or none
    "caption_threshold": ("caption", float, False),
    "pairs_from": ("pairs_from", str, True),
    "filter": ("where", str, True),  # FIELD=VALUE
}


def known_names(selection: bool = True) -> str:
    """The names a user may set, for error messages and help: the settings table, then the
    example-selection names (where the command chooses examples)."""
    text = ", ".join(sorted(SETTINGS))
    return text + (f"; example selection: {', '.join(SELECTION_NAMES)}" if selection else "")


def split_settings(given: Mapping[str, Any] | Iterable[tuple[str, Any]], selection: bool = True
                   ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Behaviour settings by name (``--set`` pairs, a grid's ``settings:``) -> (overrides of the
    settings table, for :func:`resolve`; example-selection settings, for
    :func:`unirag.retrieval.selection.selection_from_settings`). A repeated name: the last value wins,
    except the list-valued selection names (``filter``, ``pairs_from``), which collect every value.
    An unknown name is one :class:`ConfigError` line naming the known ones."""
    overrides: dict[str, Any] = {}
    chosen: dict[str, Any] = {}
    for name, value in (given.items() if isinstance(given, Mapping) else given):
        if name in SETTINGS:
            overrides[name] = value
        elif selection and name in SELECTION_NAMES:
            if SELECTION_NAMES[name][2]:  # list-valued
                chosen.setdefault(name, []).extend(value if isinstance(value, list | tuple) else [value])
            else:
                chosen[name] = value
        else:
            raise ConfigError(f"unknown setting {name!r}; known: {known_names(selection)}")
    return overrides, chosen
