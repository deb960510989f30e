"""The SLO bound (docs/definitions.md#slo-bound): the largest N whose own p95s are shown within the
lane's SLO, with no lower level seen to miss it.

A level is *shown to meet* the SLO when the 95 % upper bounds of its p95 TTFT and p95 TPOT (and p95
E2E when the SLO sets it) are within the targets and ≥ 90 % of its requests meet all of them. It is
*seen to miss* when a p95 estimate or its upper bound is over its target, or fewer than 90 % meet.
The upper bound (`p95_upper`) is one-sided, as the question is: the upper end of the p95's two-sided
95 % CI where it has one (72 samples; a 97.5 % bound), else the largest sample from 59 on: the
largest of n samples lies below the p95 with probability 0.95ⁿ, ≤ 5 % from n = 59. A level with too
few samples to bound its p95s (59, `fewest_to_bound_p95`) and no miss is *unbounded*: it neither
sets the bound nor breaks it, as the p95 latencies of lower levels are taken not to exceed those of
a higher one (each request waits for no more neighbours). The adaptive sweep therefore bounds only
the level its answer rests on (saturation/planner.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from itertools import count

from satbench.config.schema import SloConfig
from satbench.metrics.level_result import LevelResult
from satbench.metrics.stats import CONFIDENCE, Distribution, percentile_ci

SLO_MIN_ATTAINMENT = 0.90


@cache
def fewest_to_bound_p95() -> int:
    """The fewest samples whose p95 has a one-sided 95 % upper bound (59: 0.95⁵⁹ ≤ 5 % < 0.95⁵⁸);
    the two-sided CI's upper end needs more (72)."""
    return next(n for n in count(1) if 0.95 ** n <= 1.0 - CONFIDENCE)


def upper_is_largest(n: int) -> bool:
    """Whether `p95_upper` of n samples is their largest: from `fewest_to_bound_p95` samples until the
    two-sided CI's upper end exists (72)."""
    return n >= fewest_to_bound_p95() and percentile_ci(range(n), 95.0).high is None


def p95_upper(d: Distribution) -> float | None:
    """A one-sided 95 % upper bound of the p95 (docs/definitions.md#p95-upper-bound): the two-sided
    CI's upper end where it has one, else the largest sample from `fewest_to_bound_p95` samples on;
    None below."""
    ci = d.ci.get("p95")
    if ci is not None and ci.high is not None:
        return ci.high
    return d.max if d.max is not None and d.n >= fewest_to_bound_p95() else None


@dataclass(frozen=True)
class SloStanding:
    """Where a lane's levels stand against its SLO (module docstring).

    `bound`: the largest level shown to meet it below the first level seen to miss (`missed_at`),
    None when none is; `unbounded`: the levels below `missed_at` whose p95s cannot be bounded yet."""

    bound: int | None
    why: str
    missed_at: int | None = None
    unbounded: tuple[tuple[int, int], ...] = ()  # (level, its fewest samples of a judged p95)


def _judged(lv: LevelResult, slo: SloConfig) -> list[tuple[str, Distribution, float, int]]:
    lat = lv.latency
    return [(name, d, target, digits) for name, d, target, digits in (
        ("TTFT", lat.ttft_ms, slo.p95_ttft_ms, 0), ("TPOT", lat.tpot_ms, slo.p95_tpot_ms, 1),
        ("E2E", lat.e2e_ms, slo.p95_e2e_ms, 0)) if target is not None]


def p95_over(d: Distribution, target: float) -> tuple[str, float] | None:
    """What shows a p95 over `target`: ("estimate", the p95) when its estimate is, else ("upper CI",
    its upper bound, `p95_upper`) when that is over; None when neither is."""
    if d.p95 is not None and d.p95 > target:
        return "estimate", d.p95
    if (high := p95_upper(d)) is not None and high > target:
        return "upper CI", high
    return None


def p95_unbounded(d: Distribution) -> bool:
    """The p95 has no upper bound yet (too few samples): it cannot be shown within a target."""
    return p95_upper(d) is None


def estimate_misses(lv: LevelResult, slo: SloConfig) -> list[str]:
    """The targets the level's p95 estimates exceed (their upper CI ends can only be higher)."""
    return [f"p95 {name} {round(d.p95, digits or None)} ms > {target:g}"
            for name, d, target, digits in _judged(lv, slo) if d.p95 is not None and d.p95 > target]


def _misses(lv: LevelResult, slo: SloConfig) -> list[str]:
    """What shows the level over the SLO: a p95 estimate or bounded upper CI end over its target, or
    attainment below SLO_MIN_ATTAINMENT."""
    out = estimate_misses(lv, slo)
    for name, d, target, digits in _judged(lv, slo):
        if (over := p95_over(d, target)) is not None and over[0] == "upper CI":
            out.append(f"p95 {name} upper CI {round(over[1], digits or None)} ms > {target:g}")
    att = lv.slo_attainment
    if att is None or att < SLO_MIN_ATTAINMENT:
        out.append(f"attainment {att if att is None else f'{att:.0%}'} < {SLO_MIN_ATTAINMENT:.0%}")
    return out


def cannot_bound(lv: LevelResult, slo: SloConfig, n_after: int) -> list[str]:
    """The judged p95s that `n_after` samples cannot show within the SLO: one whose largest sample is
    over its target already, when the upper bound from n_after samples is their largest
    (`upper_is_largest`). Empty when more samples may still bound every p95."""
    if not upper_is_largest(n_after):
        return []
    return [f"a {name} of {round(d.max, digits or None)} ms is over {target:g} already"
            for name, d, target, digits in _judged(lv, slo) if d.max is not None and d.max > target]


def _unbounded(lv: LevelResult, slo: SloConfig) -> int | None:
    """The fewest samples of the level's judged p95s when some cannot be shown within the SLO yet
    (no upper bound); None when all can. Below 59 samples the largest is above the p95 only with
    probability 1 − 0.95ⁿ (0.34 at n = 8), so it bounds nothing."""
    short = [d.n for _, d, _, _ in _judged(lv, slo) if p95_unbounded(d)]
    return min(short) if short else None


def slo_standing(levels: list[LevelResult], slo: SloConfig | None) -> SloStanding:
    """The lane's levels against `slo` (module docstring); levels in any order."""
    if slo is None:
        return SloStanding(None, "no SLO declared for this lane")
    best: int | None = None
    unbounded: list[tuple[int, int]] = []
    for lv in sorted(levels, key=lambda x: x.concurrency):
        if fails := _misses(lv, slo):
            return SloStanding(best, f"N={lv.concurrency} misses the SLO: {'; '.join(fails)}"
                               + _note(unbounded), lv.concurrency, tuple(unbounded))
        if (n := _unbounded(lv, slo)) is not None:
            unbounded.append((lv.concurrency, n))
        else:
            best = lv.concurrency
    if best is None:
        return SloStanding(None, "no level is shown to meet the SLO: " + ", ".join(
            f"N={c} ({n} samples)" for c, n in unbounded) + f": a p95 has no 95% upper bound below "
            f"{fewest_to_bound_p95()} samples", None, tuple(unbounded))
    return SloStanding(best, f"N={best} meets the SLO and no level is seen to miss it"
                       + _note(unbounded), None, tuple(unbounded))


def _note(unbounded: list[tuple[int, int]]) -> str:
    return (f" (N={', '.join(str(n) for n, _ in unbounded)}: p95 not bounded, fewer than "
            f"{fewest_to_bound_p95()} samples, and not seen to miss)") if unbounded else ""


def slo_bound(levels: list[LevelResult], slo: SloConfig | None) -> tuple[int | None, str]:
    """(the SLO bound, why): `slo_standing`'s bound and reason."""
    s = slo_standing(levels, slo)
    return s.bound, s.why
