"""Does a higher level gain over a lower one (docs/definitions.md#gain-shown-no-gain-shown)? The three
answers the knee, the planner and the confidence line share: a gain shown, no gain shown, or not yet
known.

A gain counts when it is at least `MIN_GAIN_PER_DOUBLING` (10 %) per doubling of N on average:
X(b) ≥ g·X(a) with g = 1.1^log2(b/a).

- Gain shown (`real_gain`): P(gain) > 1 − `P_GAIN_MAX` (95 %); where P(gain) cannot be computed,
  X(b)'s mean reaches g·X(a) and lies above the upper end of X(a)'s 95 % CI.
- No gain shown (`no_gain_shown`): P(gain) < `P_GAIN_MAX` (5 %), an equivalence-style test: the
  evidence says the higher level does NOT gain 10 % per doubling, not merely that it was not seen to.
- Otherwise not known: more repetitions decide, or the answer is a range.

Formula of P(gain) (`p_gain`): with the repetitions' output tok/s at a and b (n values each, means
m, variances s²), d = m_b − g·m_a has standard error se = sqrt(s_b²/n_b + g²·s_a²/n_a) (Welch) and
P(gain) = T_ν(d / se), T_ν the Student-t CDF (metrics.quantiles.t_cdf) with the Welch–Satterthwaite ν.
Points without two repetitions a side fall back to their 95 % CIs read as normal (se = half-width ÷
1.96); with neither, P(gain) is unknown (None) and no gain can be shown.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from itertools import pairwise
from typing import Literal

from pydantic import Field

from satbench.config.schema import Strict
from satbench.metrics.quantiles import t_cdf

MIN_GAIN_PER_DOUBLING = 0.10
P_GAIN_MAX = 0.05  # P(a higher level gains) below this: no gain shown (the knee may stand)
Z_975 = 1.959964

Step = Literal["rising", "flat", "falling", "unclear"]


class Point(Strict):
    """Throughput at one level: mean, 95 % CI (its ends may be missing) and the repetitions' values."""

    n: int
    x: float
    ci_low: float | None = None
    ci_high: float | None = None
    contended: bool = False
    reps: list[float] = Field(default_factory=list, description="each repetition's output tok/s")


def needed_gain(a: Point, b: Point, min_gain: float = MIN_GAIN_PER_DOUBLING) -> float:
    """The factor X(b) / X(a) that counts as a gain: (1 + min_gain) per doubling from a.n to b.n."""
    return (1.0 + min_gain) ** math.log2(b.n / a.n)


def real_gain(a: Point, b: Point, min_gain: float = MIN_GAIN_PER_DOUBLING) -> bool:
    """b is a gain shown over a: P(gain) > 1 − P_GAIN_MAX; without a P, ≥ min_gain per doubling on
    average and above a's CI."""
    p = p_gain(a, b, min_gain)
    if p is not None:
        return p > 1.0 - P_GAIN_MAX
    above_ci = b.x > (a.ci_high if a.ci_high is not None else a.x)
    return b.x >= needed_gain(a, b, min_gain) * a.x and above_ci


def welch_p(low: Sequence[float], high: Sequence[float], factor: float) -> float | None:
    """P(mean(high) ≥ factor × mean(low)) by Welch's t (module formula); None with < 2 values a side."""
    if len(low) < 2 or len(high) < 2:
        return None
    m_l, m_h = statistics.fmean(low), statistics.fmean(high)
    v_l, v_h = statistics.variance(low) / len(low), statistics.variance(high) / len(high)
    var = v_h + factor * factor * v_l
    d = m_h - factor * m_l
    if var <= 0:
        return 1.0 if d >= 0 else 0.0
    df = var * var / ((v_h * v_h) / (len(high) - 1) + (factor ** 4) * (v_l * v_l) / (len(low) - 1))
    return t_cdf(d / math.sqrt(var), df)


def _ci_p(a: Point, b: Point, factor: float) -> float | None:
    """P(gain) from the two CIs read as normal; None when either has no upper end."""
    if a.ci_high is None or b.ci_high is None:
        return None
    se_a, se_b = (a.ci_high - a.x) / Z_975, (b.ci_high - b.x) / Z_975
    d, se = b.x - factor * a.x, math.sqrt(se_b ** 2 + (factor * se_a) ** 2)
    if se <= 0:
        return 1.0 if d >= 0 else 0.0
    return 0.5 * math.erfc(-d / se / math.sqrt(2.0))


def p_gain(a: Point, b: Point, min_gain: float = MIN_GAIN_PER_DOUBLING) -> float | None:
    """P(X(b) ≥ needed_gain(a, b) · X(a)) (module formula); None when nothing bounds it."""
    factor = needed_gain(a, b, min_gain)
    p = welch_p(a.reps, b.reps, factor)
    return p if p is not None else _ci_p(a, b, factor)


def no_gain_shown(a: Point, b: Point, min_gain: float = MIN_GAIN_PER_DOUBLING) -> bool:
    """The evidence says b does not gain min_gain per doubling over a: P(gain) < P_GAIN_MAX."""
    p = p_gain(a, b, min_gain)
    return p is not None and p < P_GAIN_MAX


def step(a: Point, b: Point, min_gain: float = MIN_GAIN_PER_DOUBLING) -> Step:
    """How throughput moves from a to b: rising (a gain shown), falling (b's CI lies wholly below
    a's), flat (no gain shown), else unclear."""
    if real_gain(a, b, min_gain):
        return "rising"
    if a.ci_low is not None and b.ci_high is not None and b.ci_high < a.ci_low:
        return "falling"
    return "flat" if no_gain_shown(a, b, min_gain) else "unclear"


def shape(points: Sequence[Point], min_gain: float = MIN_GAIN_PER_DOUBLING) -> str:
    """The curve in words, from its steps between consecutive clean levels, runs of one kind merged:
    e.g. "flat from 1 to 2, rising from 2 to 8 (not concave: a flat step below a rise)"."""
    pts = sorted((p for p in points if not p.contended), key=lambda p: p.n)
    if len(pts) < 2:
        return f"one level (N={pts[0].n})" if pts else "no clean level"
    runs: list[tuple[Step, int, int]] = []
    for a, b in pairwise(pts):
        kind = step(a, b, min_gain)
        if runs and runs[-1][0] == kind:
            runs[-1] = (kind, runs[-1][1], b.n)
        else:
            runs.append((kind, a.n, b.n))
    words = ", ".join(f"{kind} from {lo} to {hi}" for kind, lo, hi in runs)
    kinds = [r[0] for r in runs]
    later_rise = any(k == "rising" for k in kinds[kinds.index("flat") + 1:]) if "flat" in kinds else False
    return words + (" (not concave: a flat step below a rise)" if later_rise else "")
