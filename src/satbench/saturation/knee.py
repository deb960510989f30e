"""Where more concurrency stops paying: the knee of throughput X(N), and whether it stands.

Marginal-gain knee (docs/definitions.md#knee): starting from the lowest clean level, the candidate moves
to a higher level N_j only when N_j shows a gain over it (saturation/gain.py: ≥ 10 % per doubling on
average and above the candidate's 95 % CI), against every later level, so a noisy dip neither ends
the climb early nor extends it. The candidate k is then judged:

- a knee at k stands only with evidence of no gain above it: every measured level above k shows no
  gain (P(gain) < 5 %, gain.py), AND the ceiling is measured: the throughput at the slot count (or the
  highest level the server can hold). A flat step below the ceiling may be a plateau that rises again.
- still rising: k is the highest level measured up to the ceiling, and that is the ceiling (or no
  ceiling is set). Levels past the ceiling (the slots) are not judged: the ceiling binds there, so they
  cannot change the answer; they show in the curve's shape and the server-side confirmation.
- undetermined otherwise, as a range: the answer lies between k and the highest level that may still
  gain (a level whose P(gain) is 5 % or more, or the unmeasured ceiling). `unresolved` names the levels
  whose repetitions decide it; an unmeasured ceiling is decided by measuring it, not by repetitions.

A contended level (metrics/contention.py) is left out: it neither makes nor moves the knee.
Kneedle (§7.2, with ≥ 5 levels) on (log2 N, X) is reported beside it for comparison
(docs/definitions.md#kneedle).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import pairwise
from typing import Any

from pydantic import Field

from satbench.config.schema import Strict
from satbench.metrics.level_result import LevelResult
from satbench.saturation.gain import (
    MIN_GAIN_PER_DOUBLING,
    P_GAIN_MAX,
    Point,
    needed_gain,
    p_gain,
    real_gain,
    shape,
    step,
)

__all__ = ["Knee", "Point", "answer_holds_within_ci", "ci_fraction", "kneedle", "marginal_gain_knee",
           "points_of", "stands_alone"]


class Knee(Strict):
    knee: int | None
    """The knee level when it stands (module docstring); None when still rising or undetermined."""
    last_real_gain_to: int
    """The candidate: the highest level reached by gains shown from the lowest clean level."""
    reason: str
    undetermined: str | None = None
    """Why no knee can be named (a level above may still gain, the ceiling is not measured, every
    level contended; docs/definitions.md#undetermined); None: decided."""
    unresolved: list[int] = Field(default_factory=list)
    """The measured levels whose repetitions decide it: the candidate and those that may still gain."""
    range_high: int | None = None
    """Undetermined: the answer lies between last_real_gain_to and this level
    (docs/definitions.md#range-between-a-and-b)."""
    ceiling: int | None = None
    """The level the knee is judged against (the slot count, or the highest the server can hold;
    docs/definitions.md#knee-ceiling)."""
    ceiling_measured: bool = True
    p_gain: dict[int, float | None] = Field(default_factory=dict)
    """P(X(h) ≥ 1.1^log2(h/k) X(k)) for each clean measured level h above the candidate k."""
    shape: str = ""
    """The curve in words (gain.shape), e.g. "flat from 1 to 2, rising from 2 to 8 (not concave…)"."""


def points_of(levels: Sequence[LevelResult]) -> list[Point]:
    """The knee's points of measured levels: output tok/s with its CI and the repetitions' values, in
    level order; a level without a throughput is left out, a contended one is marked."""
    return [Point(n=lv.concurrency, x=est.value, ci_low=est.ci_low, ci_high=est.ci_high,
                  contended=lv.contended is not None,
                  reps=[r.output_tok_per_s for r in lv.repetitions if r.output_tok_per_s is not None])
            for lv in sorted(levels, key=lambda x: x.concurrency)
            if (est := lv.throughput.output_tok_per_s).value]


def _p_text(p: float | None) -> str:
    return "unknown (fewer than 2 repetitions and no CI)" if p is None else f"{p:.2f}"


def _candidate(pts: Sequence[Point], min_gain: float) -> int:
    """The index in `pts` (clean, in level order; not empty) of the candidate: from the first, it
    moves to a higher point only when that point shows a real gain over it (gain.real_gain)."""
    k = 0
    while True:
        nxt = next((j for j in range(k + 1, len(pts)) if real_gain(pts[k], pts[j], min_gain)), None)
        if nxt is None:
            return k
        k = nxt


def _top_candidate(cand: int, judged: int, reached: bool, ceiling: int | None, gain_words: str,
                   base: dict[str, Any]) -> Knee:
    """No knee when the candidate `cand` is the highest of the `judged` levels: a single level, or
    still rising; undetermined up to the ceiling when that is not `reached` (measured)."""
    if judged == 1 and reached:
        return Knee(knee=None, reason="a single level: no knee can be seen", **base)
    if judged == 1:
        why = f"one level measured (N={cand}), not the ceiling N={ceiling}: between {cand} and {ceiling}"
        return Knee(knee=None, reason=why, undetermined=why, range_high=ceiling, **base)
    if reached:
        return Knee(knee=None, reason=f"throughput still gains {gain_words} up to the highest level "
                                      f"N={cand}" + (f" (the ceiling N={ceiling})" if ceiling else ""),
                    **base)
    why = (f"throughput still gains {gain_words} up to N={cand}, but the ceiling N={ceiling} is not "
           f"measured: between {cand} and {ceiling}")
    return Knee(knee=None, reason=why, undetermined=why, range_high=ceiling, **base)


def marginal_gain_knee(points: Sequence[Point], min_gain: float = MIN_GAIN_PER_DOUBLING,
                       ceiling: int | None = None) -> Knee:
    """The knee of `points` judged against `ceiling` (module docstring); None: no ceiling to reach."""
    every = sorted(points, key=lambda p: p.n)
    if not every:
        raise ValueError("no points")
    clean = [p for p in every if not p.contended]
    pts = [p for p in clean if ceiling is None or p.n <= ceiling]  # past the ceiling: not the answer's
    top_n = every[-1].n
    reached = ceiling is None or any(p.n == ceiling for p in every)  # a level above it says nothing of it
    if not pts:
        why = "every level ran while other processes took CPU (contended): none can make the knee"
        return Knee(knee=None, last_real_gain_to=every[0].n, reason="every level ran contended",
                    undetermined=why, range_high=max(top_n, ceiling or top_n), ceiling=ceiling,
                    ceiling_measured=reached, shape=shape(clean))
    k = _candidate(pts, min_gain)
    cand, higher = pts[k], pts[k + 1:]
    probs = {h.n: p_gain(cand, h, min_gain) for h in higher}
    unclear = [n for n, p in probs.items() if p is None or p >= P_GAIN_MAX]
    base: dict[str, Any] = dict(last_real_gain_to=cand.n, ceiling=ceiling, ceiling_measured=reached,
                p_gain={n: None if p is None else round(p, 4) for n, p in probs.items()}, shape=shape(clean))
    gain_words = f"≥ {min_gain:.0%} per doubling"
    if unclear:
        hi = max(unclear)
        parts = [f"N={n} may still gain {gain_words} over N={cand.n} "
                 f"(needs ×{needed_gain(cand, pts[[p.n for p in pts].index(n)], min_gain):.2f}; "
                 f"P = {_p_text(probs[n])}, no gain is shown below {P_GAIN_MAX:.0%})" for n in unclear]
        high = hi if reached else max(hi, ceiling or hi)
        why = "; ".join(parts) + f": between {cand.n} and {high}"
        if not reached:
            why += f" (the ceiling N={ceiling} is not measured)"
        return Knee(knee=None, reason=why, undetermined=why, unresolved=[cand.n, *unclear], range_high=high,
                    **base)
    if not higher:
        return _top_candidate(cand.n, len(pts), reached, ceiling, gain_words, base)
    worst = max(p for p in probs.values() if p is not None)
    no_gain = (f"no level above N={cand.n} (X={cand.x:.1f}) gains {gain_words} (P(gain) ≤ {worst:.2f} "
               f"for each of {', '.join(str(h.n) for h in higher)}, < {P_GAIN_MAX:.0%})")
    if not reached:
        why = (f"{no_gain}, but the ceiling N={ceiling} is not measured: a flat step below it may be a "
               f"plateau that rises again; between {cand.n} and {ceiling}")
        return Knee(knee=None, reason=why, undetermined=why, range_high=ceiling, **base)
    return Knee(knee=cand.n, reason=no_gain + (f", up to the ceiling N={ceiling}" if ceiling else ""), **base)


def _shifted(points: Sequence[Point], n: int, to: float) -> list[Point]:
    """`points` with level n's mean moved to `to`: its repetitions and CI ends moved alike."""
    def move(p: Point) -> Point:
        d = to - p.x
        return p.model_copy(update={"x": to, "reps": [r + d for r in p.reps],
                                    "ci_low": None if p.ci_low is None else p.ci_low + d,
                                    "ci_high": None if p.ci_high is None else p.ci_high + d})
    return [move(p) if p.n == n else p for p in points]


def answer_holds_within_ci(points: Sequence[Point], n: int, ceiling: int, cap: int | None = None) -> bool:
    """Whether the knee's answer (knee, candidate, range) stays the same with level n's throughput
    at either end of its 95 % CI: then more precision at n cannot move it. With `cap` (one below the
    first level seen to miss the SLO), the answer compared is the recommendation and the range's top,
    each at most `cap`: the SLO binds wherever the curve puts them above it."""
    def answer(pts: Sequence[Point]) -> tuple[int | None, ...]:
        k = marginal_gain_knee(pts, ceiling=ceiling)
        if cap is None:
            return k.knee, k.last_real_gain_to, k.range_high
        low = k.knee if k.knee is not None else k.last_real_gain_to
        high = k.knee if k.knee is not None else k.range_high if k.range_high is not None else low
        return min(low, cap), min(high, cap)
    p = next((q for q in points if q.n == n), None)
    if p is None or p.ci_low is None or p.ci_high is None:
        return False
    now = answer(points)
    return all(answer(_shifted(points, n, end)) == now for end in (p.ci_low, p.ci_high))


def ci_fraction(lv: LevelResult) -> float | None:
    """A level's throughput 95 % CI half-width ÷ mean; None without a CI."""
    est = lv.throughput.output_tok_per_s
    if est.value is None or not est.value or est.ci_high is None:
        return None
    return (est.ci_high - est.value) / est.value


def stands_alone(points: Sequence[Point], n: int, ceiling: int) -> bool:
    """Level n needs no second repetition: it has one clean repetition with a CI (a level measured
    once gets one from its batch means, metrics/throughput.py), and the step to each clean neighbour
    at or below `ceiling` is decided with it (rising, flat or falling: gain.step), so a second
    repetition cannot change how the curve reads there."""
    pts = [p for p in points if not p.contended and p.n <= ceiling]
    at = next((i for i, p in enumerate(pts) if p.n == n), None)
    if at is None or len(pts) < 2 or len(pts[at].reps) != 1 or pts[at].ci_high is None:
        return False
    return all(step(a, b) != "unclear" for a, b in pairwise(pts[max(0, at - 1):at + 2]))


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
