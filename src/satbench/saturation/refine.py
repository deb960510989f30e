"""--refine: the extra levels to measure inside the bracket where a lane's saturation sets in."""

from __future__ import annotations

from collections.abc import Sequence

from satbench.analysis.results import LaneResult
from satbench.metrics.level_result import LevelResult
from satbench.saturation.knee import marginal_gain_knee, points_of


def refine_levels(result: LaneResult | None) -> list[int]:
    """--refine's levels for a lane's result (`refine_between` its levels); none without one."""
    return refine_between(result.levels) if result is not None else []


def refine_between(levels: Sequence[LevelResult]) -> list[int]:
    """2-3 levels inside the bracket where saturation sets in: below the knee when the step into it
    already scaled sub-linearly (< 90 % efficient: the real knee lies below), else above it.
    Without a knee, between the top two levels if the last step scaled sub-linearly; else none."""
    pts = [p for p in points_of(levels) if not p.contended]
    if len(pts) < 2:
        return []
    knee = marginal_gain_knee(pts).knee
    at = next(i for i, p in enumerate(pts) if p.n == knee) if knee is not None else len(pts) - 1

    def efficient(lo: int, hi: int) -> bool:
        return (pts[hi].x / pts[lo].x) / (pts[hi].n / pts[lo].n) >= 0.9

    if at > 0 and not efficient(at - 1, at):
        lo, hi = pts[at - 1].n, pts[at].n
    elif at + 1 < len(pts):
        lo, hi = pts[at].n, pts[at + 1].n
    else:
        return []
    return sorted({round(lo + (hi - lo) * i / 4) for i in (1, 2, 3)} - {lo, hi})
