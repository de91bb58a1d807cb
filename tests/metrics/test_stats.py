"""Intervals and paired tests over queries (unirag.metrics.stats), checked against independent computations."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import permutation_test

from unirag.errors import ConfigError
from unirag.metrics.stats import (
    Comparison,
    bootstrap_interval,
    corpus_bleu,
    paired_comparison,
    queries_needed,
    with_holm,
)

# fixed per-query scores (a CIDEr-like skewed distribution), not produced by the code under test
SCORES = np.random.default_rng(20260101).gamma(shape=1.5, scale=40.0, size=300)


def numpy_percentile_bootstrap(values: np.ndarray, n_resamples: int, seed: int) -> tuple[float, float]:
    """A plain percentile bootstrap of the mean: resample queries with replacement, 2.5/97.5 percentiles."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(values), size=(n_resamples, len(values)))
    means = values[idx].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def test_bootstrap_matches_an_independent_percentile_bootstrap():
    ours = bootstrap_interval(SCORES, n_resamples=20000, seed=3)
    low, high = numpy_percentile_bootstrap(SCORES, 20000, seed=99)  # other draws: agreement is not by seed
    width = high - low
    assert abs(ours.low - low) <= 0.02 * width
    assert abs(ours.high - high) <= 0.02 * width
    assert ours.low < SCORES.mean() < ours.high
    assert ours.se == pytest.approx(SCORES.std(ddof=1) / np.sqrt(len(SCORES)), rel=0.05)


def test_bootstrap_is_seeded_and_bca_is_available():
    a = bootstrap_interval(SCORES, n_resamples=500, seed=7)
    assert a == bootstrap_interval(SCORES, n_resamples=500, seed=7)
    assert a != bootstrap_interval(SCORES, n_resamples=500, seed=8)
    bca = bootstrap_interval(SCORES, n_resamples=2000, seed=7, method="BCa")
    assert bca.low < SCORES.mean() < bca.high
    with pytest.raises(ConfigError, match="unknown interval method"):
        bootstrap_interval(SCORES, method="normal")
    assert bootstrap_interval([1.0]) is None


def test_randomization_test_matches_scipy_permutation_test():
    rng = np.random.default_rng(5)
    base = SCORES[:120]
    run = base + rng.normal(4.0, 25.0, size=120)  # a small, noisy improvement
    ours = paired_comparison(run, base, n_resamples=5000, seed=11)
    ref = permutation_test((run, base), lambda x, y, axis: np.mean(x - y, axis=axis), permutation_type="samples",
                           vectorized=True, n_resamples=5000, alternative="two-sided",
                           random_state=np.random.default_rng(11))
    assert ours.diff == pytest.approx(float(np.mean(run - base)))
    assert ours.p_value == pytest.approx(ref.pvalue, abs=0.01)
    # exact enumeration (2^10 <= resamples): the same p-value to the last digit
    small = paired_comparison(run[:10], base[:10], n_resamples=5000, seed=0)
    exact = permutation_test((run[:10], base[:10]), lambda x, y, axis: np.mean(x - y, axis=axis),
                             permutation_type="samples", vectorized=True, n_resamples=5000)
    assert small.p_value == pytest.approx(exact.pvalue, rel=1e-12)


def test_identical_runs_give_p_one_and_a_zero_width_interval():
    c = paired_comparison(SCORES, SCORES.copy(), n_resamples=1000, seed=0)
    assert (c.diff, c.low, c.high, c.p_value) == (0.0, 0.0, 0.0, 1.0)
    assert not c.significant and c.n_needed == -1
    rows = np.abs(np.random.default_rng(1).normal(5, 2, size=(40, 10))).round()
    bleu = paired_comparison(rows, rows.copy(), lambda r: corpus_bleu(r, 4), n_resamples=300, seed=0)
    assert (bleu.diff, bleu.low, bleu.high, bleu.p_value) == (0.0, 0.0, 0.0, 1.0)


def test_a_clear_difference_is_significant_and_its_interval_excludes_zero():
    c = paired_comparison(SCORES + 10.0 + np.random.default_rng(2).normal(0, 1, 300), SCORES, n_resamples=2000)
    assert c.p_value < 0.001 and c.significant and c.n_needed is None
    assert 9 < c.low < c.diff < c.high < 11


def test_paired_comparison_refuses_unpaired_rows():
    with pytest.raises(ConfigError, match="same queries"):
        paired_comparison(SCORES[:10], SCORES[:11])


def holm(p_values):
    """The Holm-adjusted p-values :func:`with_holm` sets on comparisons with these p-values."""
    return [c.p_holm for c in with_holm([Comparison("m", 0.0, 0.0, 0.0, p, 10, 0.0) for p in p_values])]


def test_holm_step_down():
    # sorted: 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 = 0.04 -> monotone 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []


def test_holm_on_a_table_clears_borderline_cells_and_estimates_their_queries():
    base = SCORES[:200]

    def run(effect, seed):
        return paired_comparison(base + effect + np.random.default_rng(seed).normal(0, 30, 200), base,
                                 n_resamples=2000)
    comps = [run(20, 9), run(4.0, 9), run(4.0, 11), run(4.5, 10)]
    assert [c.p_value < 0.05 for c in comps] == [True, True, True, False]  # alone, three are significant
    corrected = with_holm(comps)
    assert [c.p_holm for c in corrected] == pytest.approx(holm([c.p_value for c in comps]))
    assert [c.significant for c in corrected] == [True, False, False, False]  # four tests: only one is
    for c in corrected[1:]:  # each not-significant cell says roughly how many queries would settle it
        assert c.n_needed is not None and c.n_needed > 200 * 0.8
    assert corrected[0].n_needed is None


def test_queries_needed_is_the_normal_approximation():
    # sd = se * sqrt(n) = 5; (1.959964 + 0.841621)^2 * 25 / 1 = 196.2 -> 197
    assert queries_needed(1.0, 0.5, 100) == 197
    assert queries_needed(-1.0, 0.5, 100) == 197
    assert queries_needed(0.0, 0.5, 100) == -1


def test_corpus_bleu_from_counts_equals_pycocoevalcap():
    from pycocoevalcap.bleu.bleu import Bleu

    from unirag.metrics.captions import bleu_statistics

    # "a": the closest reference (9 words to the candidate's 6) is not the shortest (2): BLEU's brevity
    # penalty depends on which one the counts record
    gts = {"a": ["a man rides a horse on the sandy beach", "horse riding"],
           "b": ["two dogs play in the snow", "dogs playing outside in snow"],
           "c": ["a plate of food with broccoli", "a dish with vegetables and rice on a plate"]}
    res = {"a": ["a man riding a brown horse"], "b": ["two dogs in the snow playing together happily"],
           "c": ["food on a plate"]}
    stats = bleu_statistics(gts, res)
    expected, _ = Bleu(4).compute_score(gts, res, verbose=0)
    rows = np.array([stats[i] for i in gts])
    for n in range(1, 5):
        assert float(corpus_bleu(rows, n)) == pytest.approx(100 * expected[n - 1], rel=1e-9)
    # vectorized over resamples: each index row recomputes corpus BLEU of that resample
    idx = np.array([[0, 0, 1], [2, 1, 2]])
    assert corpus_bleu(rows[idx], 2) == pytest.approx([float(corpus_bleu(rows[i], 2)) for i in idx])


@pytest.mark.parametrize("n, d", [(12, 30), (60, 8)])
def test_fid_from_features_matches_torchmetrics(n, d):
    import torch
    from torchmetrics.image.fid import _compute_fid

    from unirag.metrics.images import frechet_from_features, frechet_interval

    rng = np.random.default_rng(n)
    real, fake = rng.normal(0, 1, (n, d)), rng.normal(0.3, 1.2, (n, d))

    def moments(x):
        t = torch.from_numpy(x)
        return t.mean(0), torch.cov(t.T)
    expected = float(_compute_fid(*moments(fake), *moments(real)))
    assert frechet_from_features(np.concatenate([real, fake], axis=1)) == pytest.approx(expected, rel=1e-6)
    ci = frechet_interval(real, fake, n_resamples=60, seed=1, device="cpu")
    assert 0 <= ci.low < expected < ci.high and ci == frechet_interval(real, fake, n_resamples=60, seed=1)
