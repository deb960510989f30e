"""The highest open-loop rate a lane serves within its SLO (the rate a router may send it).

Rule: the largest measured rate R such that R and every lower measured rate completed, lost no
request and met the SLO from arrival (metrics/open_loop.py `meets_slo`). A lower rate that misses
ends the climb, as the SLO bound of the closed loop does: above a missed rate, a pass is noise,
not capacity. None without an SLO, or when the lowest rate already misses.
"""

from __future__ import annotations

from pydantic import Field

from satbench.config.schema import SloConfig, Strict
from satbench.metrics.open_loop import RateResult


class RateSummary(Strict):
    rate_rps: float
    goodput_rps: float | None
    completed_rps: float | None
    slo_attainment: float | None
    p95_ttft_from_arrival_ms: float | None
    p95_tpot_ms: float | None
    meets_slo: bool | None
    warnings: list[str] = Field(default_factory=list)


class RateRecommendation(Strict):
    max_rate_rps: float | None = Field(description="the highest measured rate meeting the SLO from arrival, "
                                       "with every lower one; null without an SLO or when none does")
    max_concurrency: int = Field(description="the in-flight cap the rates ran under")
    reason: str
    rates: list[RateSummary]


def _miss(r: RateResult, slo: SloConfig) -> str:
    """Why rate `r` does not meet the SLO, in words."""
    if r.status != "complete":
        return f"its run ended {r.status} ({r.reason})"
    if r.ok < r.requests:
        return f"{r.requests - r.ok} of {r.requests} requests failed"
    ttft, tpot = r.ttft_from_arrival_ms.p95, r.tpot_ms.p95
    if ttft is None or ttft > slo.p95_ttft_ms:
        return f"p95 TTFT from arrival {ttft if ttft is None else f'{ttft:.0f}'} ms > {slo.p95_ttft_ms:g} ms"
    if tpot is not None and tpot > slo.p95_tpot_ms:
        return f"p95 TPOT {tpot:.1f} ms > {slo.p95_tpot_ms:g} ms"
    e2e = r.e2e_from_arrival_ms.p95
    return f"p95 E2E from arrival {e2e if e2e is None else f'{e2e:.0f}'} ms > {slo.p95_e2e_ms:g} ms"


def max_rate(rates: list[RateResult], slo: SloConfig | None) -> RateRecommendation | None:
    """The lane's rate recommendation (see the module's rule); None when no rate ran."""
    if not rates:
        return None
    ordered = sorted(rates, key=lambda r: r.rate_rps)
    summaries = [RateSummary(rate_rps=r.rate_rps, goodput_rps=r.goodput_rps, completed_rps=r.completed_rps,
                             slo_attainment=r.slo_attainment,
                             p95_ttft_from_arrival_ms=r.ttft_from_arrival_ms.p95, p95_tpot_ms=r.tpot_ms.p95,
                             meets_slo=r.meets_slo, warnings=r.warnings) for r in ordered]
    cap = ordered[0].max_concurrency
    if slo is None:
        return RateRecommendation(max_rate_rps=None, max_concurrency=cap, rates=summaries,
                                  reason="the lane has no SLO ([lanes.slo] in a lane file): the highest rate "
                                         "within it needs one")
    best: float | None = None
    for r in ordered:
        if not r.meets_slo:
            missed = f"{r.rate_rps:g}/s misses the SLO: {_miss(r, slo)}"
            reason = (f"{best:g}/s meets the SLO from arrival; {missed}" if best is not None
                      else f"the lowest rate, {missed}; measure lower rates")
            return RateRecommendation(max_rate_rps=best, max_concurrency=cap, rates=summaries, reason=reason)
        best = r.rate_rps
    return RateRecommendation(max_rate_rps=best, max_concurrency=cap, rates=summaries,
                              reason=f"every rate up to the highest measured, {best:g}/s, meets the SLO from "
                                     "arrival: measure higher rates to find where it stops")
