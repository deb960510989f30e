"""Percentiles and confidence intervals (docs/definitions.md#percentile-ci,
docs/definitions.md#mean-over-repetitions). Never a bare number: n and CI travel with it.

- Percentiles use linear interpolation between order statistics (numpy's default, type 7).
- A percentile's 95 % CI is distribution-free: the order statistics x(l), x(u) whose ranks
  come from Binomial(n, p) (l = B⁻¹(0.025), u = B⁻¹(0.975) + 1). When n is too small
  for a finite upper rank, the CI's upper end is null (unbounded). An end that would exclude the
  interpolated estimate itself (possible for few samples and extreme percentiles) is moved to the
  estimate, so the interval always contains its point. The CI treats the pooled samples as
  independent draws: it covers within-run sampling only, not how much a whole repetition moves.
- A mean's CI is Student-t: mean ± t(0.975, n−1)·s/√n.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import Field

from satbench.metrics.quantiles import binomial_quantile, t_quantile_975
from satbench.records.record import Record

PERCENTILES = (50, 90, 95, 99)
FEW_SAMPLES = 100
CONFIDENCE = 0.95


class Interval(Record):
    low: float | None
    high: float | None


class Distribution(Record):
    """Summary of one latency sample (milliseconds unless the field name says otherwise)."""

    n: int
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    max: float | None = None
    ci: dict[str, Interval] = Field(default_factory=dict, description=(
        "95 % CI per percentile from the order statistics of the pooled sample: within-run sampling "
        "only, not repetition-to-repetition variation"))
    few_samples: bool = Field(False, description="fewer than 100 samples: read p95/p99 with their CI")


class Estimate(Record):
    """A mean with its 95 % CI and how the CI was obtained."""

    value: float | None
    ci_low: float | None = None
    ci_high: float | None = None
    n: int = 0
    ci_method: str = "none"


def percentile(values: Sequence[float], pct: float) -> float:
    """Linear-interpolation percentile (numpy 'linear'); `values` must be non-empty."""
    import numpy as np

    return float(np.percentile(np.asarray(values, dtype=float), pct))


def percentile_of(values: Sequence[float], pct: float) -> float | None:
    """`percentile` of `values`, or None when there are none."""
    return percentile(values, pct) if values else None


def percentile_ci(sorted_values: Sequence[float], pct: float) -> Interval:
    """Order-statistic 95 % CI of the `pct` percentile (see module docstring), widened where needed
    to contain `percentile(sorted_values, pct)`; `sorted_values` must be non-empty."""
    return _ci(sorted_values, pct, percentile(sorted_values, pct))


def _ci(sorted_values: Sequence[float], pct: float, point: float) -> Interval:
    """`percentile_ci` with the percentile itself (`point`) given."""
    n = len(sorted_values)
    p = pct / 100.0
    alpha = 1.0 - CONFIDENCE
    lo_rank = binomial_quantile(alpha / 2, n, p)
    hi_rank = binomial_quantile(1 - alpha / 2, n, p) + 1
    low = sorted_values[lo_rank - 1] if lo_rank >= 1 else None
    high = sorted_values[hi_rank - 1] if hi_rank <= n else None
    return Interval(low=None if low is None else min(float(low), point),
                    high=None if high is None else max(float(high), point))


def distribution(values: Sequence[float]) -> Distribution:
    """n, mean, p50/p90/p95/p99, max and their CIs; empty input gives n=0 and nulls."""
    import numpy as np

    n = len(values)
    if n == 0:
        return Distribution(n=0, few_samples=True)
    ordered = sorted(float(v) for v in values)
    array = np.asarray(ordered, dtype=float)  # once, for every percentile
    pcts = {f"p{p}": float(np.percentile(array, p)) for p in PERCENTILES}
    cis = {f"p{p}": _ci(ordered, p, pcts[f"p{p}"]) for p in PERCENTILES}
    return Distribution(
        n=n, mean=float(sum(ordered) / n), max=ordered[-1], ci=cis,
        few_samples=n < FEW_SAMPLES, **pcts,
    )


def mean_estimate(values: Sequence[float], method: str = "t over repetitions",
                  floor: float | None = None) -> Estimate:
    """Mean with a Student-t 95 % CI; one value gives no CI. `floor` clips the CI's lower end
    for quantities that cannot go below it (a rate is never negative)."""
    import numpy as np

    n = len(values)
    if n == 0:
        return Estimate(value=None, n=0)
    mean = float(sum(values) / n)
    if n == 1:
        return Estimate(value=mean, n=1, ci_method="none (one value)")
    sd = float(np.std(np.asarray(values, dtype=float), ddof=1))
    half = t_quantile_975(n - 1) * sd / math.sqrt(n)
    low = mean - half if floor is None else max(floor, mean - half)
    return Estimate(value=mean, ci_low=low, ci_high=mean + half, n=n, ci_method=method)
