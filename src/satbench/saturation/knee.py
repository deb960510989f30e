"""Where more concurrency stops paying: the knee of throughput X(N).

Marginal-gain knee (DESIGN.md §7.1): starting from the lowest level, move the candidate to a
higher level N_j only when X(N_j) is a real gain over X(N_k): at least 10 % per doubling on
average, AND above the upper end of X(N_k)'s confidence interval. The knee is the last
candidate; when that is the highest level measured there is no knee (still rising).
Requiring both, against every later level, means a noisy point inside the previous point's
CI neither ends the climb early nor extends it.

Kneedle (§7.2, with ≥ 5 levels) on (log2 N, X) is reported beside it for comparison.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from satbench.config.schema import Strict

MIN_GAIN_PER_DOUBLING = 0.10


class Point(Strict):
    """Throughput at one level: mean and 95 % CI (CI ends may be missing)."""

    n: int
    x: float
    ci_low: float | None = None
    ci_high: float | None = None


class Knee(Strict):
    knee: int | None
    """The knee level, or None when throughput still rises at the highest level."""
    last_real_gain_to: int
    reason: str


def real_gain(a: Point, b: Point, min_gain: float = MIN_GAIN_PER_DOUBLING) -> bool:
    """b is a real gain over a: ≥ min_gain per doubling on average, and above a's CI."""
    doublings = math.log2(b.n / a.n)
    needed = (1.0 + min_gain) ** doublings
    above_ci = b.x > (a.ci_high if a.ci_high is not None else a.x)
    return b.x >= needed * a.x and above_ci


def marginal_gain_knee(points: Sequence[Point], min_gain: float = MIN_GAIN_PER_DOUBLING) -> Knee:
    pts = sorted(points, key=lambda p: p.n)
    if not pts:
        raise ValueError("no points")
    k = 0
    while True:
        nxt = next((j for j in range(k + 1, len(pts)) if real_gain(pts[k], pts[j], min_gain)), None)
        if nxt is None:
            break
        k = nxt
    if k == len(pts) - 1 and len(pts) > 1:
        return Knee(knee=None, last_real_gain_to=pts[k].n,
                    reason=f"throughput still gains ≥ {min_gain:.0%} per doubling up to the highest level "
                           f"N={pts[k].n}")
    if len(pts) == 1:
        return Knee(knee=None, last_real_gain_to=pts[0].n, reason="a single level: no knee can be seen")
    return Knee(knee=pts[k].n, last_real_gain_to=pts[k].n,
                reason=(f"no higher level gains ≥ {min_gain:.0%} per doubling beyond N={pts[k].n} "
                        f"(X={pts[k].x:.1f}) outside its 95 % CI"))


def kneedle(points: Sequence[Point]) -> int | None:
    """Kneedle on (log2 N, X) for a concave increasing curve: the level farthest above the chord
    of the normalized curve. None with fewer than 5 levels or a flat curve."""
    pts = sorted(points, key=lambda p: p.n)
    if len(pts) < 5:
        return None
    xs = [math.log2(p.n) for p in pts]
    ys = [p.x for p in pts]
    x0, x1, y0, y1 = xs[0], xs[-1], min(ys), max(ys)
    if x1 == x0 or y1 == y0:
        return None
    diff = [(y - y0) / (y1 - y0) - (x - x0) / (x1 - x0) for x, y in zip(xs, ys)]
    best = max(range(len(pts)), key=lambda i: diff[i])
    return pts[best].n if diff[best] > 0 else None
