"""The SLO bound (DESIGN.md §7.4): the largest N such that it and every lower level meet the lane's SLO."""

from __future__ import annotations

from functools import cache
from itertools import count

from satbench.config.schema import SloConfig
from satbench.metrics.level_result import LevelResult
from satbench.metrics.stats import Distribution, percentile_ci

SLO_MIN_ATTAINMENT = 0.90


@cache
def fewest_to_bound_p95() -> int:
    """The fewest samples whose p95 has a finite upper 95 % CI end (72: below, its rank is past n)."""
    return next(n for n in count(1) if percentile_ci(range(n), 95).high is not None)


def _p95_miss(name: str, d: Distribution, target_ms: float | None, digits: int = 0) -> str | None:
    """Why the upper 95 % CI end of `d`'s p95 does not show it within `target_ms`; None when it does.
    An open upper end (too few samples) shows nothing: the largest sample is above the p95 only
    with probability 1 − 0.95ⁿ (0.34 at n = 8), so it is not taken in its place."""
    if target_ms is None:
        return None
    ci = d.ci.get("p95")
    if ci is None or ci.high is None:
        return (f"p95 {name} cannot be bounded from {d.n} samples (its 95% CI has no upper end below "
                f"{fewest_to_bound_p95()}: measure more requests)")
    if ci.high > target_ms:
        return f"p95 {name} upper CI {round(ci.high, digits or None)} ms > {target_ms:g}"
    return None


def slo_bound(levels: list[LevelResult], slo: SloConfig | None) -> tuple[int | None, str]:
    """Largest N such that it and every lower level meet the SLO: upper-CI p95 TTFT and p95 TPOT
    (and p95 E2E when the SLO sets it) within the targets and ≥ 90 % of requests meeting all."""
    if slo is None:
        return None, "no SLO declared for this lane"
    best, why = None, ""
    for lv in sorted(levels, key=lambda x: x.concurrency):
        att = lv.slo_attainment
        fails = [m for m in (_p95_miss("TTFT", lv.latency.ttft_ms, slo.p95_ttft_ms),
                             _p95_miss("TPOT", lv.latency.tpot_ms, slo.p95_tpot_ms, digits=1),
                             _p95_miss("E2E", lv.latency.e2e_ms, slo.p95_e2e_ms)) if m]
        if att is None or att < SLO_MIN_ATTAINMENT:
            fails.append(f"attainment {att if att is None else f'{att:.0%}'} < {SLO_MIN_ATTAINMENT:.0%}")
        if fails:
            why = f"N={lv.concurrency} misses the SLO: {'; '.join(fails)}"
            break
        best = lv.concurrency
    return best, why or "every measured level meets the SLO"
