"""Each official behaviour of issue 15 (retrieval, generation, metrics), pinned against the official code.

The docstrings cite the official repository, file, commit and lines each test follows (read through the
public code index, lines counted on the stored copy; no official code is copied). ``default`` must stay
unirag's own behaviour: each test checks both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pytest

from official_metrics import uniir_compute_recall_at_k
from unirag.data.records import Candidate, Modality
from unirag.errors import ConfigError
from unirag.generators.base import GenerationOptions
from unirag.profiles import SETTINGS, resolve
from unirag.retrieval.pairing import QueryIdentity
from unirag.retrieval.uniir_pairs import UniIRCompleter, per_hit_pairs


class _Metas(list):
    pass


@dataclass
class FakeIndex:
    """Just what the completers read: metas, and a raw top-k search that returns a scripted top list per query."""

    metas: list
    tops: dict  # query text or image path -> ranked gids

    def __len__(self):
        return len(self.metas)

    def topk(self, vectors, k, modality):
        rows = [self.tops[key] for key in self._keys]
        ids = np.full((len(rows), k), -1, dtype=np.int64)
        for i, r in enumerate(rows):
            ids[i, : min(k, len(r))] = r[:k]
        return np.zeros(ids.shape, dtype=np.float32), ids


class RecordingEncoder:
    def __init__(self, index):
        self.index, self.seen = index, []

    def encode_records(self, records, images_root, progress=False):
        self.seen.extend(records)
        self.index._keys = [r.txt if r.txt is not None else r.img_path for r in records]
        return np.zeros((len(records), 4), dtype=np.float32)


def _meta(did, modality, txt=None, img=None):
    return Candidate(did, modality, txt, img)


def _ident(txt=None, img=None, excluded=()):
    return QueryIdentity(None, frozenset(), frozenset(excluded), txt, img)


def _world():
    metas = [_meta("t0", Modality.TEXT, txt="a dog on a sofa"),          # 0: retrieved caption
             _meta("i1", Modality.IMAGE, img="imgs/query.jpg"),           # 1: the query's own image
             _meta("t2", Modality.TEXT, txt="another caption"),           # 2: same modality as t0
             _meta("i3", Modality.IMAGE, img="imgs/other.jpg"),           # 3: acceptable complement
             _meta("i4", Modality.IMAGE, img="imgs/q4.jpg")]
    tops = {"a dog on a sofa": [0, 2, 1, 3, 4], "imgs/other.jpg": [3, 2, 0]}
    return FakeIndex(metas, tops)


def test_uniir_completion_instructed_query_and_first_opposite_modality_hit():
    """TIGER-AI-Lab/UniIR src/common/mbeir_retriever.py at commit 72871c19, get_raw_retrieved_candidates
    (:235-304): every text or image candidate becomes a complement query (:264-273), all are searched with
    ``complement_retriever.retrieve(k=10)`` (:277), and the complement is the first hit of the opposite
    modality (:288) that has an img_path differing from the original query's ``query_img_path``
    (:290-295), else a txt differing from its ``query_txt`` (:296-298); none: ``complement_cand`` stays
    None (:285, :302). src/common/interactive_retriever.py at commit 1104db5c: ``self.dataset_id = 9``
    (MSCOCO) at :40 for every candidate; _add_queries (:81) gives a text task_id 0 (:84) and an image
    task_id 3 (:93), the qid ``"9:<n>"`` (:108); the same at commit d8f81bfd (:40, :75, :78, :83, :92).
    Neither stored interactive_retriever.py has the ``add_queries`` / ``retrieve(k=)`` pair that
    mbeir_retriever.py@72871c19 calls (they have ``_add_queries`` and ``retrieve(queries, k)``): the
    matching version is not in the code index."""
    index = _world()
    enc = RecordingEncoder(index)
    completer = UniIRCompleter(index, lambda: enc, None)
    found = completer.complement(0, _ident(img="imgs/query.jpg"))
    assert found == (3, "uniir")  # t2 (same modality) and i1 (the query's image) are passed over
    q = enc.seen[0]
    assert q.qid.startswith("9:") and q.task_id == 0 and q.modality is Modality.TEXT and q.txt == "a dog on a sofa"
    # an image candidate becomes a task-3 query; its complement must differ from the query's *text*
    found = completer.complement(3, _ident(txt="another caption"))
    assert found == (0, "uniir") and enc.seen[-1].task_id == 3 and enc.seen[-1].img_path == "imgs/other.jpg"
    # nothing acceptable in the top 10: no pair (UniIR leaves complement_cand None)
    index.tops["a dog on a sofa"] = [0, 2, 1]
    assert UniIRCompleter(index, lambda: enc, None).complement(0, _ident(img="imgs/query.jpg")) is None


def test_uniir_completion_compares_exact_strings_and_searches_ten():
    """UniIR compares ``cand.get("img_path") != ...["query_img_path"]`` and ``cand.get("txt") != ...["query_txt"]``
    as plain strings and retrieves ``k=10`` complements over the whole pool (TIGER-AI-Lab/UniIR
    src/common/mbeir_retriever.py at commit 72871c19: :277, :290-298)."""
    index = _world()
    index.metas[1] = _meta("i1", Modality.IMAGE, img="./imgs/query.jpg")  # another spelling: UniIR accepts it
    enc = RecordingEncoder(index)
    depths = []
    search = index.topk
    index.topk = lambda v, k, m: (depths.append((k, m)), search(v, k, m))[1]
    assert UniIRCompleter(index, lambda: enc, None).complement(0, _ident(img="imgs/query.jpg")) == (1, "uniir")
    assert depths == [(5, None)]  # min(10, index size), over every modality


def test_uniir_acceptance_falls_through_to_the_text_check():
    """TIGER-AI-Lab/UniIR src/common/mbeir_retriever.py at commit 72871c19 :290-298: the image-path test and
    the text test are two ``if``s in turn, so a hit showing the query's own image is still accepted when it
    carries a text of its own that differs from the query's text; without such a text it is passed over."""
    from unirag.retrieval.uniir_pairs import uniir_accepts

    own_image_with_text = _meta("i9", Modality.IMAGE, txt="a caption stored with it", img="imgs/query.jpg")
    assert uniir_accepts(own_image_with_text, None, "imgs/query.jpg")
    assert not uniir_accepts(own_image_with_text, "a caption stored with it", "imgs/query.jpg")
    assert not uniir_accepts(_meta("i1", Modality.IMAGE, img="imgs/query.jpg"), None, "imgs/query.jpg")
    assert uniir_accepts(_meta("i3", Modality.IMAGE, img="imgs/other.jpg"), "anything", "imgs/query.jpg")
    assert not uniir_accepts(_meta("t2", Modality.TEXT, txt="the query"), "the query", None)
    assert uniir_accepts(_meta("t2", Modality.TEXT, txt="the query"), None, "imgs/query.jpg")


def test_per_hit_pairs_repeat_images_drop_query_and_take_first_k():
    """castorini/UniRAG src/unirag/incontext_example_provider.py at commit 07190083, get_candidates (:10-45):
    every retrieved candidate with its complement is one (txt, image) pair (:12-35, :44) - an image may
    repeat - a hit without a pair is skipped (:36-38), so is a pair whose txt equals the query text or whose
    image is the query image (:39-43); src/unirag/generator_prompt.py at commit 07190083 takes the first
    ``min(self.k, len(retrieval_results))`` of them (:20, :60, :100)."""
    metas = [_meta("t0", Modality.TEXT, txt="cap A"), _meta("i1", Modality.IMAGE, img="x.jpg"),
             _meta("t2", Modality.TEXT, txt="the query text"), _meta("t3", Modality.TEXT, txt="cap C"),
             _meta("t4", Modality.TEXT, txt="cap D")]
    index = FakeIndex(metas, {})

    class Comp:
        def complement(self, gid, ident):
            return {0: (1, "uniir"), 1: (3, "uniir"), 2: (1, "uniir"), 3: (1, "uniir"), 4: None}[gid]

    pairs, read = per_hit_pairs(index, Comp(), _ident(txt="the query text"), [0, 1, 2, 3, 4], [.9, .8, .7, .6, .5], 3)
    assert [(i, t) for i, t, _, _ in pairs] == [(1, 0), (1, 3), (1, 3)]  # image 1 thrice; t2 = the query's text
    assert read == 5
    two, _ = per_hit_pairs(index, Comp(), _ident(txt="the query text"), [0, 1, 2, 3, 4], [.9] * 5, 2)
    assert len(two) == 2


def test_per_hit_pairs_read_as_many_hits_as_unirags_retrieval_saved():
    """UniIR's run_retrieval searches ``k = max`` of the dataset's Recall@k (TIGER-AI-Lab/UniIR
    src/common/mbeir_retriever.py at commit 72871c19 :412) and saves every hit for UniRAG (:441-465);
    UniRAG's config lists Recall@1/5/10 for MSCOCO and Recall@10/20/50 for Fashion200k
    (src/models/uniir_clip/clip_scorefusion/configs_scripts/large/eval/unirag/retrieval.yaml at commit
    98dc570c :39-40, :45-46), and castorini/UniRAG get_candidates (incontext_example_provider.py at commit
    07190083 :10-45) reads them all: a Fashion200k query's pairs may come from hits 11-50."""
    from unirag.retrieval.uniir_pairs import unirag_depth

    assert (unirag_depth("9:17"), unirag_depth("coco:q3:139"), unirag_depth("1:17"), unirag_depth("x")) == (10, 10, 50, 10)
    metas = [_meta(f"t{i}", Modality.TEXT, txt=f"cap {i}") for i in range(30)] + [_meta("i", Modality.IMAGE, img="x.jpg")]
    index = FakeIndex(metas, {})

    class OnlyLate:  # only hits 20 and 21 have a complement
        def complement(self, gid, ident):
            return (30, "uniir") if gid in (20, 21) else None

    ids, scores = list(range(30)), [1.0] * 30
    mscoco, read = per_hit_pairs(index, OnlyLate(), _ident(), ids, scores, 2)
    assert mscoco == [] and read == 10
    fashion, read = per_hit_pairs(index, OnlyLate(), _ident(), ids, scores, 2, unirag_depth("1:5"))
    assert [(i, t) for i, t, _, _ in fashion] == [(30, 20), (30, 21)] and read == 30


def test_temperature_setting_reads_none_and_refuses_a_negative_value():
    assert resolve("default", temperature="none")["temperature"] is None
    assert resolve("default", temperature="0.3")["temperature"] == 0.3
    with pytest.raises(ConfigError, match="temperature"):
        resolve("default", temperature="-1")


def test_every_paper_vs_code_row_cites_the_official_file_and_lines():
    """A row whose two profiles differ is a paper-vs-code choice: its ``cite`` names the official file and lines
    the ``official`` value follows (the docs' parity tables repeat them)."""
    for name, s in SETTINGS.items():
        if s.default != s.official:
            assert re.search(r"\S+\.(py|yaml|sh|txt)\S*:\d", s.cite), name


def test_temperature_none_sends_none():
    """castorini/UniRAG src/unirag/caption_generation_inference.py at commit 294f843a: infer_gemini (:33)
    passes ``GenerationConfig(max_output_tokens=max_output_tokens)`` only (:79-82); infer_gpt (:96) calls
    ``client.chat.completions.create(model=, messages=, max_tokens=)`` only (:174-178); infer_llava (:208)
    calls ``model.generate(**inputs, max_new_tokens=max_output_tokens)`` (:258). No temperature anywhere."""
    from unirag.generators.gemini import GeminiGenerator
    from unirag.generators.openai_compat import OpenAIChatGenerator

    oa = OpenAIChatGenerator("gpt-4o", base_url="http://127.0.0.1:9/v1")
    assert "temperature" not in oa.request_body([], GenerationOptions(max_tokens=5, temperature=None))
    assert oa.request_body([], GenerationOptions(max_tokens=5))["temperature"] == 0.0
    gem = GeminiGenerator.__new__(GeminiGenerator)
    assert "temperature" not in GeminiGenerator.request_config(gem, GenerationOptions(temperature=None))
    assert GeminiGenerator.request_config(gem, GenerationOptions())["temperature"] == 0.0


def test_captioner_takes_its_temperature_from_the_profile():
    from unirag.pipelines.captioner import Captioner

    assert Captioner("retrieval:top1").options.temperature == 0.0
    official = Captioner("retrieval:top1", profile="official")
    assert official.options.temperature is None and official.to_dict()["profile"]["profile"] == "official"
    assert Captioner("retrieval:top1", profile="official", temperature=0.3).options.temperature == 0.3
    again = Captioner.from_dict(official.to_dict())
    assert again.options.temperature is None and again.settings["caption_prompts"] == "official"


def test_gemini_official_prompts():
    """castorini/UniRAG src/unirag/caption_generation_inference.py at commit 294f843a: SYSTEM_MESSAGE (:29)
    goes to GPT (:139, :154) and LLaVA (:247) only; infer_gemini (:33) builds ``message =
    p_class.prepare_gemini_message(...)`` (:58) and sends ``content = [message, ...]`` (:61, :73), the
    prompt file's text alone; src/unirag/prompts/gemini-caption-prompt-with-examples.txt (commit 6c4eda29)
    ends its last line (:5, after "do not say any other words or explain.") with " The answer must be
    compulsarily in one line." (quoted in issue 15; the prompt file is not copied here)."""
    from unirag.prompts.caption import caption_template
    from unirag.prompts.official import GEMINI_ONE_LINE, SYSTEM_SENTENCE, apply_caption_prompts

    paper = caption_template("gemini")
    official = apply_caption_prompts(paper, "gemini", "official")
    assert paper.text("zero_shot").startswith(SYSTEM_SENTENCE)
    assert not official.text("zero_shot").startswith("You are") and "I have provided you an image" in \
        official.text("zero_shot")
    assert official.text("few_shot").endswith("The answer must be compulsarily in one line.") and \
        GEMINI_ONE_LINE not in paper.text("few_shot")
    # on the instruction's last line after one space, as the file's last line (:5), not on a line of its own
    last = official.text("few_shot").splitlines()[-1]
    assert last == paper.text("few_shot").splitlines()[-1] + " " + GEMINI_ONE_LINE
    assert official.sha256 != paper.sha256  # run identities tell the two wordings apart
    gpt = caption_template("gpt4o")
    assert apply_caption_prompts(gpt, "gpt4o", "official") is gpt  # GPT-4o: the paper's wording is the official one
    assert apply_caption_prompts(paper, "gemini", "paper") is paper


def test_official_prompts_come_from_the_users_checkout(tmp_path):
    from unirag.prompts.caption import caption_template
    from unirag.prompts.official import apply_caption_prompts

    prompts = tmp_path / "UniRAG" / "src" / "unirag" / "prompts"
    prompts.mkdir(parents=True)
    (prompts / "caption-prompt-without-examples.txt").write_text("ZERO words\n")
    with pytest.raises(ConfigError, match="no gemini-caption-prompt-with-examples.txt"):
        apply_caption_prompts(caption_template("gemini"), "gemini", "official", tmp_path / "UniRAG")
    (prompts / "gemini-caption-prompt-with-examples.txt").write_text("FEW {num} words\n\n")
    tpl = apply_caption_prompts(caption_template("gemini"), "gemini", "official", tmp_path / "UniRAG")
    assert tpl.text("zero_shot") == "ZERO words" and tpl.fill("few_shot", num=2) == "FEW 2 words"
    with pytest.raises(ConfigError, match="not a directory"):
        apply_caption_prompts(caption_template("gemini"), "gemini", "official", tmp_path / "nowhere")
    with pytest.raises(ConfigError, match="caption_prompts=official"):
        apply_caption_prompts(caption_template("gemini"), "gemini", "paper", tmp_path / "UniRAG")


def test_emu2_official_sampling_is_the_pipelines_default():
    """castorini/UniRAG src/unirag/image_generation_inference.py at commit 916425f8 calls the Emu2-Gen
    pipeline as ``ret = pipe(prompts)`` (:139): no size, steps or guidance, so the pipeline's defaults
    apply. Those defaults live in the hub checkpoint's ``pipeline_emu2_gen.py`` (BAAI/Emu2-Gen, not in the
    code index); the same class in baaivision/Emu ``Emu2/demo/backend/hf_model/emu/diffusion.py`` at
    commit 48615f5d, ``EmuVisualGeneration.forward`` (:151-160), declares height = width = 1024 (:154-155),
    ``num_inference_steps=50`` (:156), ``guidance_scale=3.`` (:157). LaVIT's call (:70-78) passes 1024x1024,
    ``guidance_scale_for_llm=4.0`` (:74) and ``num_inference_steps=25`` (:76): unirag's default for both."""
    from unirag.generators.images.base import sampling_defaults
    from unirag.pipelines.image_gen import picture_settings
    from unirag.pipelines.image_generator import ImageGenerator

    assert sampling_defaults("emu2-gen:BAAI/Emu2-Gen", "official") == {"steps": 50, "guidance": 3.0}
    assert sampling_defaults("emu2-gen:BAAI/Emu2-Gen", "default") == {"steps": 25, "guidance": 4.0}
    assert sampling_defaults("lavit:./LaVIT", "official") == {"steps": 25, "guidance": 4.0}
    s = picture_settings("emu2-gen:x", "official")
    assert (s["steps"], s["guidance"], s["width"], s["height"]) == (50, 3.0, 1024, 1024)
    assert picture_settings("emu2-gen:x", "official", steps=7)["steps"] == 7  # given wins
    lavit = picture_settings("lavit:x", "official")  # UniRAG :67, :74, :76
    assert (lavit["steps"], lavit["guidance"], lavit["width"], lavit["height"]) == (25, 4.0, 1024, 1024)
    default = picture_settings("emu2-gen:x", "default")
    assert (default["steps"], default["guidance"], default["width"], default["height"]) == (25, 4.0, 1024, 1024)
    assert ImageGenerator("emu2-gen:BAAI/Emu2-Gen", profile="official").settings["steps"] == 50
    assert ImageGenerator("emu2-gen:BAAI/Emu2-Gen").settings["steps"] == 25


def test_uniir_recall_on_raw_ids_beside_hit_after_replacement():
    """TIGER-AI-Lab/UniIR src/common/mbeir_retriever.py at commit 72871c19: compute_recall_at_k (:149-166)
    is called on the raw retrieved ids (``retrieved_indices_for_qid``, :469-480), never on the complement
    candidates (ported in tests/official_metrics.py); unirag's hit@k scores the complement-replaced list
    (paper §5)."""
    from unirag.metrics.retrieval import evaluate_run

    qrels = {"q1": {"img7"}, "q2": {"img9"}}
    raw = {"q1": ["txt7_0", "img3"], "q2": ["img9", "img1"]}           # q1's top hit is a caption of img7
    replaced = {"q1": ["img7", "img3"], "q2": ["img9", "img1"]}         # ... replaced by its image
    m = evaluate_run(replaced, qrels, [1, 2], raw=raw)
    assert m["hit@1"] == 1.0 and m["uniir_recall@1"] == 0.5
    for k in (1, 2):
        official = np.mean([uniir_compute_recall_at_k(sorted(qrels[q]), raw[q], k) for q in qrels])
        assert m[f"uniir_recall@{k}"] == pytest.approx(official)
    assert "uniir_recall@1" not in evaluate_run(replaced, qrels, [1])
