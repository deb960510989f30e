"""The highest open-loop rate a lane serves within its SLO, the rate a router may send it
(docs/definitions.md#highest-open-loop-rate).

A rate is judged as a closed-loop level is (saturation/slo.py), on its latencies *from arrival*:
it is *shown to meet* the SLO when it completed, lost no request, ≥ SLO_MIN_ATTAINMENT of its
requests met every target from arrival, and the upper 95 % CI ends of its p95 TTFT from arrival,
p95 TPOT and (when set) p95 E2E from arrival are within the targets; *seen to miss* when it did not
complete, lost a request, fell short of that attainment, or a p95 estimate or bounded upper CI end is
over its target; otherwise *unbounded* (too few requests to bound a p95: `fewest_to_bound_p95`).

Rule: the largest rate shown to meet the SLO with no lower rate seen to miss it. An unbounded rate
neither sets it nor breaks it. None without an SLO, or when no rate qualifies.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from satbench.config.schema import SloConfig, Strict
from satbench.metrics.open_loop import RateResult
from satbench.metrics.stats import Distribution
from satbench.saturation.slo import SLO_MIN_ATTAINMENT, fewest_to_bound_p95, p95_over, p95_unbounded

Standing = Literal["meets", "misses", "unbounded"]


class RateSummary(Strict):
    rate_rps: float
    goodput_rps: float | None
    completed_rps: float | None
    slo_attainment: float | None
    p95_ttft_from_arrival_ms: float | None
    p95_tpot_ms: float | None
    standing: Standing | None = Field(description="against the SLO (module rule); null without one")
    why: list[str] = Field(default_factory=list, description="what shows it missing, or what is unbounded")
    warnings: list[str] = Field(default_factory=list)


class RateRecommendation(Strict):
    max_rate_rps: float | None = Field(description="the highest rate shown to meet the SLO from arrival "
                                       "with no lower rate seen to miss; null without an SLO or when none")
    max_concurrency: int = Field(description="the in-flight cap the rates ran under")
    reason: str
    rates: list[RateSummary]


def _judged(r: RateResult, slo: SloConfig) -> list[tuple[str, Distribution, float]]:
    return [(name, d, target) for name, d, target in (
        ("TTFT from arrival", r.ttft_from_arrival_ms, slo.p95_ttft_ms), ("TPOT", r.tpot_ms, slo.p95_tpot_ms),
        ("E2E from arrival", r.e2e_from_arrival_ms, slo.p95_e2e_ms)) if target is not None]


def standing(r: RateResult, slo: SloConfig) -> tuple[Standing, list[str]]:
    """Where one rate stands against the SLO, and why (module docstring)."""
    misses = []
    if r.status != "complete":
        misses.append(f"its run ended {r.status}" + (f" ({r.reason})" if r.reason else ""))
    if r.ok < r.requests:
        misses.append(f"{r.requests - r.ok} of {r.requests} requests failed")
    att = r.slo_attainment
    if att is None or att < SLO_MIN_ATTAINMENT:
        misses.append(f"attainment {'n/a' if att is None else f'{att:.0%}'} < {SLO_MIN_ATTAINMENT:.0%}")
    open_ends = []
    for name, d, target in _judged(r, slo):
        if (over := p95_over(d, target)) is not None:
            shown = f"p95 {name}" if over[0] == "estimate" else f"p95 {name} upper CI"
            misses.append(f"{shown} {over[1]:.0f} ms > {target:g} ms")
        elif d.p95 is None or p95_unbounded(d):
            open_ends.append(f"p95 {name} from {d.n} samples has no upper CI end (needs "
                             f"{fewest_to_bound_p95()}: more requests per rate)")
    if misses:
        return "misses", misses
    return ("unbounded", open_ends) if open_ends else ("meets", [])


def max_rate(rates: list[RateResult], slo: SloConfig | None) -> RateRecommendation | None:
    """The lane's rate recommendation (the module's rule); None when no rate ran."""
    if not rates:
        return None
    ordered = sorted(rates, key=lambda r: r.rate_rps)
    judged = [standing(r, slo) if slo is not None else (None, []) for r in ordered]
    summaries = [RateSummary(rate_rps=r.rate_rps, goodput_rps=r.goodput_rps, completed_rps=r.completed_rps,
                             slo_attainment=r.slo_attainment,
                             p95_ttft_from_arrival_ms=r.ttft_from_arrival_ms.p95, p95_tpot_ms=r.tpot_ms.p95,
                             standing=st, why=why, warnings=r.warnings)
                 for r, (st, why) in zip(ordered, judged)]
    cap = ordered[0].max_concurrency
    if slo is None:
        return RateRecommendation(max_rate_rps=None, max_concurrency=cap, rates=summaries,
                                  reason="the lane has no SLO ([lanes.slo] in a lane file): the highest rate "
                                         "within it needs one")
    best: float | None = None
    unbounded: list[str] = []
    ended = None
    for r, (st, why) in zip(ordered, judged):
        if st == "misses":
            ended = f"{r.rate_rps:g}/s misses the SLO: {'; '.join(why)}"
            break
        if st == "meets":
            best = r.rate_rps
        else:
            unbounded.append(f"{r.rate_rps:g}/s ({why[0]})")
    head = (f"{best:g}/s is shown to meet the SLO from arrival" if best is not None
            else "no rate is shown to meet the SLO from arrival")
    parts = [head] + ([ended] if ended else ["no measured rate misses it: measure higher rates to find where "
                                            "it stops"])
    if unbounded:
        parts.append("not yet bounded: " + ", ".join(unbounded))
    return RateRecommendation(max_rate_rps=best, max_concurrency=cap, rates=summaries,
                              reason="; ".join(parts))
