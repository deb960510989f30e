"""A fairness check's statistics with their confidence intervals, and the one rule that decides them
(docs/definitions.md#fairness-cis, docs/definitions.md#verdict).

A `Statistic` is an estimate of a property of the scheduler (not of the sample: it does not drift
with the number of requests), its CI, and the bound it must not exceed. The decision rule:

- pass: the CI lies at or below the bound (its upper end ≤ bound);
- fail: the CI lies beyond it (its lower end > bound);
- marginal: the CI straddles the bound (or an end is unbounded: too few samples to say).

A check measures in rounds: base rounds, then one more round at a time while its verdict is
marginal, up to a cap (FairnessConfig.rounds). Deciding at every look inflates the error rate, so
every look uses the Bonferroni level 1 − (1 − CONFIDENCE) ÷ L over the L looks the cap allows
(`decision_level`): a confident wrong verdict over all looks then has probability ≤ 5 % per
statistic (≤ 2.5 % each way), as far as the CI method holds its level. The level is fixed by the
configuration, not by when the runner stopped, so `analyze` decides the same from the same events.

CI methods (each a small function here): Student-t over rounds (`t_interval`), distribution-free
order statistics for a quantile (`quantile_interval`), and the percentile bootstrap (`median_interval`,
and F1's and F3's in analysis/service), seeded from the check's name and its data (`seeded`), so the
same events give the same CI byte for byte.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from satbench.metrics.quantiles import binomial_quantile, t_two_sided_quantile
from satbench.metrics.stats import CONFIDENCE
from satbench.records.record import Record

if TYPE_CHECKING:  # numpy is imported where a CI is computed: reading results.json needs none of it
    import numpy as np

BOOTSTRAP_RESAMPLES = 2000
Decision = Literal["pass", "fail", "marginal"]


class Statistic(Record):
    """One statistic of a check: estimate, CI at the decision level, bound and decision."""

    name: str = Field(description="what it estimates, with its unit in the name (max_itl_ms)")
    estimate: float
    ci_low: float | None = Field(description="null: unbounded below (too few samples)")
    ci_high: float | None = Field(description="null: unbounded above (too few samples)")
    ci_level: float = Field(description="the CI's coverage: 1 − 0.05 ÷ looks (Bonferroni over the looks "
                                        "the cap allows)")
    ci_method: str
    bound: float = Field(description="the statistic must not exceed it")
    n: int = Field(description="the units the CI rests on (rounds, probes, pairs, intervals, requests)")
    decision: Decision = Field(description="pass: CI ≤ bound; fail: CI > bound; marginal: it straddles")


def decision_level(looks: int) -> float:
    """The CI level of each look: 1 − (1 − CONFIDENCE) ÷ looks."""
    return 1.0 - (1.0 - CONFIDENCE) / max(1, looks)


def decide(ci_low: float | None, ci_high: float | None, bound: float) -> Decision:
    """pass when the CI's upper end is at most the bound, fail when its lower end exceeds it."""
    if ci_high is not None and ci_high <= bound:
        return "pass"
    if ci_low is not None and ci_low > bound:
        return "fail"
    return "marginal"


def statistic(name: str, estimate: float, ci: tuple[float | None, float | None], bound: float, *,
              level: float, method: str, n: int) -> Statistic:
    """A Statistic decided by `decide`; the CI is widened to contain the estimate."""
    low, high = ci
    low = None if low is None else min(low, estimate)
    high = None if high is None else max(high, estimate)
    return Statistic(name=name, estimate=estimate, ci_low=low, ci_high=high, ci_level=level,
                     ci_method=method, bound=bound, n=n, decision=decide(low, high, bound))


def t_interval(values: Sequence[float], level: float) -> tuple[float | None, float | None]:
    """Student-t CI of the mean: mean ± t(level, n − 1)·s ÷ √n; unbounded with fewer than 2 values."""
    n = len(values)
    if n < 2:
        return None, None
    mean = math.fsum(values) / n
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_two_sided_quantile(n - 1, level) * sd / math.sqrt(n)
    return mean - half, mean + half


def quantile_estimate(values: Sequence[float], q: float) -> float:
    """The q quantile by linear interpolation (numpy's default); `values` non-empty."""
    import numpy as np

    return float(np.percentile(np.asarray(values, dtype=float), 100.0 * q))


def quantile_interval(values: Sequence[float], q: float, level: float) -> tuple[float | None, float | None]:
    """Distribution-free CI of the q quantile: the order statistics x(l), x(u) with l = B⁻¹(α/2)
    and u = B⁻¹(1 − α/2) + 1 for B ~ Binomial(n, q), α = 1 − level; an end beyond the sample is
    unbounded (None)."""
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        return None, None
    alpha = 1.0 - level
    lo_rank = binomial_quantile(alpha / 2, n, q)
    hi_rank = binomial_quantile(1 - alpha / 2, n, q) + 1
    return (ordered[lo_rank - 1] if lo_rank >= 1 else None, ordered[hi_rank - 1] if hi_rank <= n else None)


def seeded(*parts: object) -> np.random.Generator:
    """A generator seeded from the sha256 of `parts` (the check's name and its data)."""
    import numpy as np

    digest = hashlib.sha256(repr(parts).encode()).digest()
    return np.random.Generator(np.random.PCG64(int.from_bytes(digest[:8], "little")))


def percentile_interval(resampled: np.ndarray, level: float) -> tuple[float, float]:
    """The percentile bootstrap's CI: the (1 ∓ level) ÷ 2 quantiles of the resampled statistic."""
    import numpy as np

    lo, hi = np.percentile(resampled, [50.0 * (1.0 - level), 50.0 * (1.0 + level)])
    return float(lo), float(hi)


PICKS_PER_BLOCK = 1 << 20  # resampled indices drawn at once: a bootstrap's memory is bounded by this


def _picks(rng: np.random.Generator, n: int, resamples: int) -> Iterator[np.ndarray]:
    """The indices of `resamples` resamples of size `n`, as blocks of rows: the same numbers as one
    draw of shape (resamples, n), with at most ~PICKS_PER_BLOCK of them at once (each block but the last
    has an even count: numpy draws these indices two to a 64-bit output, and drops an odd count's last
    half, so even blocks read the generator exactly as one draw does)."""
    rows = max(2, PICKS_PER_BLOCK // max(n, 1) // 2 * 2)
    for start in range(0, resamples, rows):
        yield rng.integers(0, n, size=(min(rows, resamples - start), n))


def resampled_sums(values: np.ndarray, rng: np.random.Generator, resamples: int = BOOTSTRAP_RESAMPLES
                   ) -> np.ndarray:
    """Σ over a resample (with replacement, same size) of the rows of `values` (units × columns),
    for each of `resamples` resamples: shape (resamples, columns)."""
    import numpy as np

    return np.concatenate([values[picks].sum(axis=1) for picks in _picks(rng, values.shape[0], resamples)])


def median_interval(values: Sequence[float], level: float, *seed: object
                    ) -> tuple[float | None, float | None]:
    """Percentile-bootstrap CI of the median, seeded from `seed` and the values; unbounded for fewer
    than 2 values. (The order-statistic CI needs 7 values before it bounds a median at 98.3 %.)"""
    import numpy as np

    if len(values) < 2:
        return None, None
    data = np.asarray(values, dtype=float)
    rng = seeded(*seed, list(values))
    blocks = _picks(rng, len(data), BOOTSTRAP_RESAMPLES)
    medians = np.concatenate([np.median(data[p], axis=1) for p in blocks])
    return percentile_interval(medians, level)
