"""Confidence intervals and paired significance tests over queries (scipy; the ``eval`` extra).

A metric's figure is built from per-query *rows*: one value per query for a mean metric (ROUGE-L,
CIDEr-D, CLIP Score, hit@k ...), or the statistics a corpus figure sums (BLEU's n-gram counts, see
:func:`corpus_bleu`). Intervals and tests resample query *indices* and recompute the figure from the
indexed rows, never rescoring: pycocoevalcap's Java scorers run once per evaluation.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from unirag.errors import ConfigError

DEFAULT_RESAMPLES = 1000
CONFIDENCE = 0.95
ALPHA = 0.05
POWER = 0.8
METHODS = ("percentile", "BCa")
#: Rows x resamples held in memory at once (scipy's ``batch``): keeps 5k queries x 10 BLEU counts small.
_BATCH_CELLS = 4_000_000

Figure = Callable[[Any], Any]


def mean_figure(rows: Any) -> Any:
    """The mean of the first column over the query axis (rows ``(..., n, m)``)."""
    return rows[..., 0].mean(axis=-1)


def corpus_bleu(rows: Any, order: int) -> Any:
    """pycocoevalcap's corpus BLEU-``order`` (x100, ``BleuScorer.compute_score``'s smoothing and brevity
    penalty) from per-query rows ``[testlen, reflen (closest), guess_1..4, correct_1..4]``."""
    import numpy as np

    tiny, small = 1e-15, 1e-9
    total = rows.sum(axis=-2)
    score = np.ones(total.shape[:-1])
    for k in range(order):
        score = score * (total[..., 6 + k] + tiny) / (total[..., 2 + k] + small)
    score = score ** (1.0 / order)
    ratio = (total[..., 0] + tiny) / (total[..., 1] + small)
    penalty = np.where(ratio < 1, np.exp(1 - 1 / np.maximum(ratio, tiny)), 1.0)
    return 100.0 * score * penalty


@dataclass(frozen=True)
class Interval:
    """A confidence interval (``low``, ``high``) and the bootstrap standard error ``se``."""

    low: float
    high: float
    se: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


@dataclass(frozen=True)
class Comparison:
    """A run minus its baseline on ``n`` shared queries: ``diff``, its paired bootstrap interval, the
    randomization ``p_value`` (``p_holm`` once corrected across a table) and, when not significant,
    ``n_needed``: roughly how many queries would detect it (-1 when the difference is exactly 0)."""

    metric: str
    diff: float
    low: float
    high: float
    p_value: float
    n: int
    se: float
    p_holm: float | None = None
    n_needed: int | None = None

    @property
    def significant(self) -> bool:
        p = self.p_holm if self.p_holm is not None else self.p_value
        return p < ALPHA

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "significant": self.significant}


def _check(n_resamples: int, method: str, confidence: float) -> str:
    if int(n_resamples) < 1:
        raise ConfigError(f"the number of resamples must be positive, got {n_resamples}")
    if not 0 < confidence < 1:
        raise ConfigError(f"confidence must be between 0 and 1, got {confidence}")
    by_lower = {m.lower(): m for m in (*METHODS, "centred")}
    if method.lower() not in by_lower:
        raise ConfigError(f"unknown interval method {method!r}: use one of {', '.join(METHODS)}")
    return by_lower[method.lower()]


def as_rows(values: Any) -> Any:
    """Per-query values ``(n,)`` or rows ``(n, m)`` as a float array ``(n, m)``."""
    import numpy as np

    rows = np.asarray(values, dtype=float)
    return rows[:, None] if rows.ndim == 1 else rows


def _batch(rows: Any) -> int:
    return max(1, _BATCH_CELLS // max(1, rows.size))


def bootstrap_interval(values: Any, figure: Figure = mean_figure, *, n_resamples: int = DEFAULT_RESAMPLES,
                       seed: int = 0, confidence: float = CONFIDENCE, method: str = "percentile"
                       ) -> Interval | None:
    """The ``confidence`` bootstrap interval of ``figure(rows)`` over queries (None for fewer than 2).

    ``values``: one value, or one row of statistics, per query; ``figure`` maps rows ``(..., n, m)`` to
    ``(...)``. ``method``: "percentile" or "BCa" (scipy, seeded by ``seed``), or "centred": the resampled
    figures' spread around their median placed around the measured figure, for FID and IS, whose
    resamples are biased because resampling repeats images. A constant figure gives that point (scipy
    would return NaN for BCa).
    """
    import numpy as np
    from scipy.stats import bootstrap

    method = _check(n_resamples, method, confidence)
    rows = as_rows(values)
    n = len(rows)
    if n < 2:
        return None

    def statistic(idx: Any, axis: int = -1) -> Any:
        return figure(rows[np.moveaxis(idx, axis, -1)])

    resample = functools.partial(bootstrap, (np.arange(n),), statistic, n_resamples=int(n_resamples),
                                 vectorized=True, batch=_batch(rows), confidence_level=confidence)
    res = resample(method="percentile", random_state=np.random.default_rng(seed))
    dist = res.bootstrap_distribution
    point = float(figure(rows))
    if np.ptp(dist) == 0:
        return Interval(point, point, 0.0)
    if method == "centred":
        low, mid, high = np.percentile(dist, [100 * (1 - confidence) / 2, 50, 100 * (1 + confidence) / 2])
        return Interval(point - (mid - low), point + (high - mid), float(res.standard_error))
    if method == "BCa":  # same seed, so the same resamples
        res = resample(method=method, random_state=np.random.default_rng(seed))
    return Interval(float(res.confidence_interval.low), float(res.confidence_interval.high),
                    float(res.standard_error))


def queries_needed(diff: float, se: float, n: int, *, alpha: float = ALPHA, power: float = POWER) -> int | None:
    """Queries a paired two-sided test needs to detect ``diff`` with probability ``power`` at level ``alpha``:
    ``((z_{1-alpha/2} + z_power) * sd / diff)^2``, the per-query SD estimated as ``se * sqrt(n)`` from the
    bootstrap standard error on ``n`` queries. -1 when ``diff`` is 0; None when ``se`` is 0."""
    from scipy.stats import norm

    if diff == 0:
        return -1
    if se <= 0 or not math.isfinite(se):
        return None
    sd = se * math.sqrt(n)
    z = float(norm.ppf(1 - alpha / 2) + norm.ppf(power))
    return max(2, math.ceil((z * sd / abs(diff)) ** 2))


def paired_comparison(run: Any, baseline: Any, figure: Figure = mean_figure, *, metric: str = "",
                      n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0, confidence: float = CONFIDENCE,
                      method: str = "percentile") -> Comparison:
    """``run`` against ``baseline`` (rows of the *same queries in the same order*): the difference of their
    figures, its paired bootstrap interval (the same query indices drawn for both), the two-sided p-value
    of ``scipy.stats.permutation_test`` with ``permutation_type="samples"`` (under the null each query's
    two rows are exchangeable) and :func:`queries_needed` when p >= 0.05.
    """
    import numpy as np
    from scipy.stats import permutation_test

    a, b = as_rows(baseline), as_rows(run)
    if a.shape != b.shape:
        raise ConfigError(f"paired comparison needs the same queries in both runs: got {len(b)} and {len(a)} rows")
    n = len(a)
    if n < 2:
        raise ConfigError(f"a paired comparison needs at least 2 shared queries, got {n}")
    diff = float(figure(b) - figure(a))
    interval = bootstrap_interval(np.concatenate([a, b], axis=1),  # checks the arguments before the test runs
                                  lambda rows: figure(rows[..., a.shape[1]:]) - figure(rows[..., :a.shape[1]]),
                                  n_resamples=n_resamples, seed=seed, confidence=confidence, method=method)
    both = np.concatenate([a, b])

    def difference(x: Any, y: Any, axis: int = -1) -> Any:
        return figure(both[np.moveaxis(y, axis, -1)]) - figure(both[np.moveaxis(x, axis, -1)])

    test = permutation_test((np.arange(n), np.arange(n) + n), difference, permutation_type="samples",
                            vectorized=True, n_resamples=int(n_resamples), batch=_batch(both),
                            alternative="two-sided", random_state=np.random.default_rng(seed))
    p = float(min(1.0, test.pvalue))
    assert interval is not None  # n >= 2
    return Comparison(metric=metric, diff=diff, low=interval.low, high=interval.high, p_value=p, n=n,
                      se=interval.se, n_needed=None if p < ALPHA else queries_needed(diff, interval.se, n))


def with_holm(comparisons: Sequence[Comparison]) -> list[Comparison]:
    """The comparisons with ``p_holm`` set across all of them, Holm's step-down adjusted p-value (the i-th
    smallest p times (m - i + 1), made monotone and capped at 1), and ``n_needed`` for those that are no
    longer significant after the correction."""
    out = list(comparisons)
    running = 0.0
    for rank, i in enumerate(sorted(range(len(out)), key=lambda i: comparisons[i].p_value)):
        c = comparisons[i]
        running = max(running, min(1.0, (len(out) - rank) * float(c.p_value)))
        needed = (c.n_needed if c.n_needed is not None else queries_needed(c.diff, c.se, c.n)) \
            if running >= ALPHA else None
        out[i] = replace(c, p_holm=running, n_needed=needed)
    return out


# --- per-query rows of unirag's metrics ----------------------------------------------------------------

#: Per-query field holding BLEU's statistics (written by ``unirag evaluate captions``).
BLEU_STATS = "bleu_stats"


def metric_rows(records: Mapping[str, Mapping[str, Any]], metric: str, qids: Sequence[str]
                ) -> tuple[Any, Figure] | None:
    """(rows, figure) of ``metric`` over ``qids`` from per-query records: BLEU-n from its n-gram counts, any
    other metric as the mean of its values. None when some query lacks them (FID: a corpus figure)."""
    if metric.startswith("BLEU-") and metric[5:].isdigit():
        if not all(isinstance(records[q].get(BLEU_STATS), list) for q in qids):
            return None
        return as_rows([records[q][BLEU_STATS] for q in qids]), functools.partial(corpus_bleu, order=int(metric[5:]))
    if not all(isinstance(records[q].get(metric), int | float) for q in qids):
        return None
    return as_rows([float(records[q][metric]) for q in qids]), mean_figure


def shifted(interval: Interval | None, shift: float) -> Interval | None:
    """The interval moved by ``shift``: the reported figure differs from what the rows rebuild (METEOR's
    jar aggregate, IS's random split)."""
    if interval is None or shift == 0:
        return interval
    return Interval(interval.low + shift, interval.high + shift, interval.se)


def query_intervals_result(records: Mapping[str, Mapping[str, Any]], figures: Mapping[str, float],
                           resamples: int, seed: int, method: str) -> dict[str, Any]:
    """The ``intervals`` (``{metric: {"low", "high", "se"}}`` for each figure the per-query records can
    rebuild, :func:`shifted` onto the figure) and ``bootstrap`` (how) entries of an evaluation's
    metrics.json; {} when ``resamples`` is 0."""
    if not resamples:
        return {}
    settings = {"unit": "query", "method": _check(resamples, method, CONFIDENCE), "n_resamples": int(resamples),
                "seed": int(seed), "confidence": CONFIDENCE}
    qids = list(records)
    intervals: dict[str, dict[str, float]] = {}
    for metric, value in figures.items():
        found = metric_rows(records, metric, qids) if qids else None
        if found is None:
            continue
        rows, figure = found
        interval = bootstrap_interval(rows, figure, n_resamples=resamples, seed=seed, method=method)
        shift = float(value) - float(figure(rows))
        interval = shifted(interval, shift if abs(shift) > 1e-6 * max(1.0, abs(float(value))) else 0.0)
        if interval is not None:
            intervals[metric] = interval.as_dict()
    return {"intervals": intervals, "bootstrap": settings}
