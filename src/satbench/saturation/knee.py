"""Where more concurrency stops paying: the knee of throughput X(N).

Marginal-gain knee (DESIGN.md §7.1): starting from the lowest level, move the candidate to a
higher level N_j only when X(N_j) is a real gain over X(N_k): at least 10 % per doubling on
average, AND above the upper end of X(N_k)'s confidence interval. The knee is the last
candidate; when that is the highest level measured there is no knee (still rising).
Requiring both, against every later level, means a noisy point inside the previous point's
CI neither ends the climb early nor extends it. A level whose gain is large enough but lies inside
the candidate's CI cannot be told from noise: the knee is then undetermined (never the lower level
by default), and names the pair to measure more. A contended level (metrics/contention.py) is left
out: it neither makes nor moves the knee.

Kneedle (§7.2, with ≥ 5 levels) on (log2 N, X) is reported beside it for comparison.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import Field

from satbench.config.schema import Strict
from satbench.metrics.level_result import LevelResult

MIN_GAIN_PER_DOUBLING = 0.10


class Point(Strict):
    """Throughput at one level: mean and 95 % CI (CI ends may be missing)."""

    n: int
    x: float
    ci_low: float | None = None
    ci_high: float | None = None
    contended: bool = False


class Knee(Strict):
    knee: int | None
    """The knee level, or None when throughput still rises at the highest level or it is undetermined."""
    last_real_gain_to: int
    reason: str
    undetermined: str | None = None
    """Why no knee can be named from these points (CIs too wide, every level contended); None: decided."""
    unresolved: list[int] = Field(default_factory=list)
    """The levels whose CIs overlap where the decision lies: more repetitions of these decide it."""


def points_of(levels: Sequence[LevelResult]) -> list[Point]:
    """The knee's points of measured levels: output tok/s with its CI, in level order; a level without
    a throughput is left out, a contended one is marked."""
    return [Point(n=lv.concurrency, x=est.value, ci_low=est.ci_low, ci_high=est.ci_high,
                  contended=lv.contended is not None)
            for lv in sorted(levels, key=lambda x: x.concurrency)
            if (est := lv.throughput.output_tok_per_s).value]


def needed_gain(a: Point, b: Point, min_gain: float = MIN_GAIN_PER_DOUBLING) -> float:
    """The factor X(b) / X(a) that counts as a gain: (1 + min_gain) per doubling from a.n to b.n."""
    return (1.0 + min_gain) ** math.log2(b.n / a.n)


def real_gain(a: Point, b: Point, min_gain: float = MIN_GAIN_PER_DOUBLING) -> bool:
    """b is a real gain over a: ≥ min_gain per doubling on average, and above a's CI."""
    above_ci = b.x > (a.ci_high if a.ci_high is not None else a.x)
    return b.x >= needed_gain(a, b, min_gain) * a.x and above_ci


def ambiguous_gain(a: Point, b: Point, min_gain: float = MIN_GAIN_PER_DOUBLING) -> bool:
    """b gains enough over a by its mean, but not above a's CI: noise cannot be ruled out."""
    return b.x >= needed_gain(a, b, min_gain) * a.x and not real_gain(a, b, min_gain)


def marginal_gain_knee(points: Sequence[Point], min_gain: float = MIN_GAIN_PER_DOUBLING) -> Knee:
    every = sorted(points, key=lambda p: p.n)
    if not every:
        raise ValueError("no points")
    pts = [p for p in every if not p.contended]
    if not pts:
        return Knee(knee=None, last_real_gain_to=every[0].n, reason="every level ran contended",
                    undetermined="every level ran while other processes took CPU (contended): none can "
                                 "make the knee")
    k = 0
    while True:
        nxt = next((j for j in range(k + 1, len(pts)) if real_gain(pts[k], pts[j], min_gain)), None)
        if nxt is None:
            break
        k = nxt
    unsure = next((j for j in range(k + 1, len(pts)) if ambiguous_gain(pts[k], pts[j], min_gain)), None)
    if unsure is not None:
        a, b = pts[k], pts[unsure]
        top = a.ci_high if a.ci_high is not None else a.x
        why = (f"N={b.n} gains {b.x / a.x - 1:.0%} over N={a.n} (≥ {needed_gain(a, b, min_gain) - 1:.0%} "
               f"needed) but lies inside N={a.n}'s 95 % CI (up to {top:.1f}): more repetitions decide "
               "whether it is a gain")
        return Knee(knee=None, last_real_gain_to=a.n, reason=why, undetermined=why, unresolved=[a.n, b.n])
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
