"""Image metrics: torchmetrics FID / IS arithmetic checked against numpy/scipy with an injected
feature extractor, CLIP Score with a tiny random CLIP, and a real image run end to end."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from eval_run_factory import coco_rows, write_image_task, write_run
from injected_features import PooledColour
from PIL import Image
from scipy import linalg, special, stats

from tiny_models import tiny_clip_dir
from unirag.cli.main import cli
from unirag.errors import ConfigError, InputError
from unirag.metrics import images as im
from unirag.metrics.image_run import evaluate_image_run

N = 24


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny tensors: thread start-up and contention on a shared 2-core machine cost more than they save."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _np_features(paths, module) -> np.ndarray:
    """Independent path: PIL -> numpy -> one image at a time through the module."""
    feats = []
    for p in paths:
        arr = np.asarray(Image.open(p).convert("RGB"))
        x = torch.from_numpy(arr.copy()).permute(2, 0, 1)[None]
        feats.append(module(x).double().numpy()[0])
    return np.stack(feats)


@pytest.fixture(scope="module")
def coco_sets(coco_mini):
    rows = coco_rows(coco_mini, 2 * N)
    real = [coco_mini / r["image"] for r in rows[:N]]
    fake = [coco_mini / r["image"] for r in rows[N:]]
    return real, fake


def test_fid_matches_numpy_scipy(coco_sets):
    real, fake = coco_sets
    net = PooledColour()
    got = im.frechet_distance(real, fake, net, batch_size=5)
    a, b = _np_features(real, net), _np_features(fake, net)
    mu1, mu2 = a.mean(0), b.mean(0)
    s1, s2 = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    covmean = linalg.sqrtm(s1 @ s2).real
    expected = float(((mu1 - mu2) ** 2).sum() + np.trace(s1) + np.trace(s2) - 2 * np.trace(covmean))
    assert expected > 0.01
    assert got == pytest.approx(expected, rel=1e-4)
    assert im.frechet_distance(real, real, net) == pytest.approx(0.0, abs=1e-6)


def test_fid_features_come_back_in_input_order_and_rebuild_the_fid(coco_sets):
    """FID's interval resamples the (real, generated) feature pairs: they must be the images' own features
    in the order given (batches are formed by image size), and rebuild the same FID."""
    real, fake = coco_sets
    real = [*real[1:], real[0]]  # an order the size sort changes
    net = PooledColour()
    feats: list = []
    got = im.frechet_distance(real, fake, net, batch_size=5, features=feats)
    assert np.allclose(feats[0], _np_features(real, net), atol=1e-5)
    assert np.allclose(feats[1], _np_features(fake, net), atol=1e-5)
    assert im.frechet_from_features(np.concatenate(feats, axis=1)) == pytest.approx(got, rel=1e-5)


def test_inception_score_from_logits_rebuilds_torchmetrics(coco_sets):
    """IS's interval recomputes the score from resampled logits: on the logits in torchmetrics' own
    random order (its seeded ``randperm``) the same chunks and marginals give the same IS."""
    real, fake = coco_sets
    logits: list = []
    mean, _ = im.inception_score([*real, *fake], PooledColour(10, 1), splits=5, seed=4, batch_size=5,
                                 features=logits)
    assert logits[0].shape == (len(real) + len(fake), 10)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(4)
        order = torch.randperm(len(logits[0])).numpy()
    assert float(im.inception_from_logits(logits[0][order], 5)) == pytest.approx(mean, rel=1e-6)  # 48 rows: 10,10,10,10,8


@pytest.mark.filterwarnings("ignore:std\\(\\)")  # SD of a single split is undefined (NaN), as expected
def test_inception_score_matches_numpy_scipy(coco_sets):
    real, fake = coco_sets
    paths = real + fake
    net = PooledColour(dim=10, seed=1)
    splits, seed = 4, 7
    mean, sd = im.inception_score(paths, net, splits=splits, seed=seed, batch_size=8)
    logits = _np_features(paths, net)
    torch.manual_seed(seed)
    order = torch.randperm(len(paths)).numpy()  # the split torchmetrics draws from the seeded RNG
    probs = special.softmax(logits[order], axis=1)
    size = -(-len(paths) // splits)
    scores = []
    for i in range(0, len(paths), size):
        p = probs[i:i + size]
        marginal = p.mean(0)
        scores.append(np.exp(np.mean([stats.entropy(row, marginal) for row in p])))
    assert mean == pytest.approx(np.mean(scores), rel=1e-5)
    assert sd == pytest.approx(np.std(scores, ddof=1), rel=1e-4)
    assert mean > 1.0
    # one split: the permutation does not matter, and the value is the whole-set IS
    one, _ = im.inception_score(paths, net, splits=1, seed=123)
    p = special.softmax(logits, axis=1)
    assert one == pytest.approx(np.exp(np.mean([stats.entropy(r, p.mean(0)) for r in p])), rel=1e-5)


def test_images_are_fed_as_rgb_uint8_without_resizing(coco_mini, tmp_path):
    rows = coco_rows(coco_mini, 1)
    src = coco_mini / rows[0]["image"]
    t = im.load_uint8(src)
    with Image.open(src) as pil:
        assert t.shape == (3, pil.height, pil.width) and t.dtype == torch.uint8
        assert tuple(t[:, 0, 0].tolist()) == pil.convert("RGB").getpixel((0, 0))
    odd = tmp_path / "odd.png"
    Image.new("RGB", (50, 30), (10, 20, 30)).save(odd)
    batches = list(im.size_batches([src, src, odd, src], batch_size=8))
    assert [tuple(b.shape) for b in batches] == [(2, *t.shape), (1, 3, 30, 50), (1, *t.shape)]


def test_corrupt_image_names_the_file(tmp_path):
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not a png")
    with pytest.raises(InputError, match="bad.png"):
        im.load_uint8(bad)


@pytest.fixture(scope="module")
def tiny_clip():
    return im.load_clip(tiny_clip_dir())


def test_clip_score_matches_direct_model_computation(coco_mini, tiny_clip):
    rows = coco_rows(coco_mini, 8)
    paths = [coco_mini / r["image"] for r in rows]
    texts = [r["captions"][0] for r in rows]
    corpus, per_item = im.clip_scores(paths, texts, tiny_clip)
    model, processor = tiny_clip
    with torch.no_grad():
        pixel = processor(images=[Image.open(p).convert("RGB") for p in paths], return_tensors="pt")["pixel_values"]
        tok = processor(text=texts, return_tensors="pt", padding=True)
        out = model(input_ids=tok["input_ids"], attention_mask=tok["attention_mask"], pixel_values=pixel)
    cos = torch.nn.functional.cosine_similarity(out.image_embeds, out.text_embeds).numpy()
    assert per_item == pytest.approx(list(np.maximum(100 * cos, 0)), abs=1e-3)
    assert corpus == pytest.approx(max(100 * cos.mean(), 0.0), abs=1e-3)
    assert any(s > 0 for s in per_item)  # the comparison is not trivially 0 == 0


def test_missing_clip_model_names_the_option(tmp_path):
    with pytest.raises(ConfigError, match="--clip-model"):
        im.load_clip(tmp_path / "no-such-clip")


def test_images_and_texts_that_do_not_pair_up_fail_before_any_network_runs(coco_mini):
    """The scorer checks the pairing once, for the API and ``unirag evaluate images`` alike."""
    import unirag

    def never(*_args):
        raise AssertionError("a network ran before the pairing was checked")

    images = sorted((coco_mini / "images").glob("*.jpg"))[:2]
    with pytest.raises(ConfigError, match="got 2 images and 1 texts: give one text per image"):
        unirag.image_metrics(images, ["a dog"], images, fid_feature=never, is_feature=never, clip=(never, never))


@pytest.fixture
def without_torch_fidelity(monkeypatch):
    """Behave as if the optional extra is absent, so these tests run (never skip) even where it is installed."""
    monkeypatch.setitem(sys.modules, "torch_fidelity", None)
    assert importlib.util.find_spec("torch_fidelity") is None


def test_standard_inception_without_extra_says_what_to_install(without_torch_fidelity):
    with pytest.raises(im.MetricUnavailable) as e:
        im.standard_inception(None, "2048")
    assert "unirag[image-metrics]" in str(e.value) and "\n" not in str(e.value)


# ---- a real image run ----

@pytest.fixture(scope="module")
def image_run(tmp_path_factory, coco_mini):
    """10 caption queries; 'generated' images are other COCO photos saved as PNG (one resized),
    query 0 failed."""
    tmp = tmp_path_factory.mktemp("imgeval")
    rows = coco_rows(coco_mini, 20)
    queries, pool = write_image_task(tmp, rows[:10])
    run = tmp / "run"
    (run / "images").mkdir(parents=True)
    records = [{"qid": f"t:{rows[0]['image_id']}", "status": "error", "error": "CUDA out of memory",
                "image": None}]
    for i, r in enumerate(rows[1:10], start=1):
        img = Image.open(coco_mini / rows[10 + i]["image"]).convert("RGB")
        if i == 3:
            img = img.resize((256, 256))
        img.save(run / "images" / f"{i}.png")
        records.append({"qid": f"t:{r['image_id']}", "image": f"images/{i}.png"})
    write_run(run, records, {"task": "image", "generator": "diffusers:tiny", "mode": "zero-shot", "k": 0})
    return run, queries, pool, rows


def test_image_run_metrics_with_injected_networks(image_run, coco_mini, tiny_clip):
    run, queries, pool, rows = image_run
    net = PooledColour()
    result = evaluate_image_run(run, queries, pool, coco_mini, fid_feature=net, is_feature=PooledColour(10, 1),
                                clip=tiny_clip, is_splits=3, device="cpu")
    assert result["n_scored"] == 9 and result["n_failed"] == 1
    assert set(result["metrics"]) == {"FID", "CLIP Score", "IS", "IS SD"}
    # FID is over the matched queries only: real = the photos of queries 1..9
    real = [coco_mini / r["image"] for r in rows[1:10]]
    fake = [run / "images" / f"{i}.png" for i in range(1, 10)]
    assert result["metrics"]["FID"] == pytest.approx(im.frechet_distance(real, fake, net), rel=1e-6)
    saved = json.loads((run / "metrics.json").read_text())
    assert saved["metrics"] == pytest.approx(result["metrics"])
    per_query = [json.loads(x) for x in (run / "metrics_per_query.jsonl").read_text().splitlines()]
    assert [p["qid"] for p in per_query] == [f"t:{r['image_id']}" for r in rows[1:10]]
    # intervals: CLIP Score from its per-query scores, FID from resampled feature pairs, IS from resampled logits
    cis = saved["intervals"]
    assert set(cis) == {"FID", "CLIP Score", "IS"} and saved["bootstrap"]["fid"]["method"] == "centred"
    assert cis["IS"]["low"] <= result["metrics"]["IS"] <= cis["IS"]["high"]
    clip = cis["CLIP Score"]
    assert clip["low"] < result["metrics"]["CLIP Score"] < clip["high"]
    assert cis["FID"]["low"] < cis["FID"]["high"] and cis["FID"]["se"] > 0


def test_cli_without_extra_runs_clip_and_says_how_to_get_fid(image_run, coco_mini, without_torch_fidelity):
    run, queries, pool, _ = image_run
    res = CliRunner().invoke(cli, ["evaluate", "images", "--run", str(run), "--queries", str(queries), "--pool",
                                   str(pool), "--images-root", str(coco_mini), "--clip-model", str(tiny_clip_dir()),
                                   "--device", "cpu"])
    assert res.exit_code == 0, res.output
    assert res.output.count("unirag[image-metrics]") == 1  # one line for FID and IS together
    saved = json.loads((run / "metrics.json").read_text())
    assert list(saved["metrics"]) == ["CLIP Score"] and set(saved["skipped_metrics"]) == {"FID", "IS"}
    ci = saved["intervals"]["CLIP Score"]
    clip_line = next(line for line in res.output.splitlines() if line.startswith("CLIP Score ") and "[" in line
                     and "it/s" not in line and "img" not in line)
    assert f"[{ci['low']:.2f}, {ci['high']:.2f}]" in clip_line and "95% CI: percentile bootstrap" in res.output


def test_cli_with_nothing_runnable_fails_clearly(image_run, coco_mini, without_torch_fidelity):
    run, queries, pool, _ = image_run
    res = CliRunner().invoke(cli, ["evaluate", "images", "--run", str(run), "--queries", str(queries), "--pool",
                                   str(pool), "--images-root", str(coco_mini), "--no-clip"])
    assert res.exit_code != 0
    assert isinstance(res.exception, ConfigError) and "no image metric could run" in str(res.exception)


def test_missing_clip_model_is_skipped_with_one_line_and_fid_still_runs(image_run, coco_mini, tmp_path):
    run, queries, pool, _ = image_run
    result = evaluate_image_run(run, queries, pool, coco_mini, fid_feature=PooledColour(), is_feature=PooledColour(),
                                clip_model=tmp_path / "no-clip", write=False)
    assert list(result["metrics"]) == ["FID", "IS", "IS SD"]
    line = result["skipped_metrics"]["CLIP Score"]
    assert "--clip-model" in line and "\n" not in line


def test_missing_generated_image_names_line(image_run, coco_mini, tmp_path):
    run, queries, pool, rows = image_run
    bad = write_run(tmp_path / "bad", [{"qid": f"t:{rows[1]['image_id']}", "image": "images/missing.png"}],
                    {"task": "image"})
    with pytest.raises(InputError, match=r"outputs.jsonl:1.*image"):
        evaluate_image_run(bad, queries, pool, coco_mini, clip_model=None, fid_feature=PooledColour())


def test_caption_run_is_refused(image_run, coco_mini, tmp_path):
    _, queries, pool, rows = image_run
    bad = write_run(tmp_path / "cap", [{"qid": f"t:{rows[1]['image_id']}", "caption": "x"}], {"task": "caption"})
    with pytest.raises(InputError, match="evaluate captions"):
        evaluate_image_run(bad, queries, pool, coco_mini)


def test_relative_image_paths_resolve_against_the_run_dir_not_the_cwd(image_run, coco_mini, tmp_path, monkeypatch):
    run, queries, pool, _ = image_run
    stored = [json.loads(x).get("image") for x in (run / "outputs.jsonl").read_text().splitlines()]
    assert stored[1] == "images/1.png"  # the run records relative paths
    monkeypatch.chdir(tmp_path)  # no images/ here: resolving against the cwd would fail with "not found"
    assert not Path("images").exists()
    result = evaluate_image_run(Path(run), queries, pool, coco_mini, clip_model=None, fid_feature=PooledColour(),
                                is_feature=PooledColour(10, 1), is_splits=3, device="cpu", write=False)
    assert result["n_scored"] == 9 and "FID" in result["metrics"]
