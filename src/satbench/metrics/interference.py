"""Cross-lane interference: a lane's figures when all lanes run together ÷ its solo figures."""

from __future__ import annotations

from pydantic import Field

from satbench.config import Strict
from satbench.metrics.level import LevelResult
from satbench.metrics.stats import Distribution, Estimate

RATIO_METHOD = "together ÷ solo; CI by interval arithmetic on the two 95 % CIs (conservative)"


class Ratio(Strict):
    value: float | None
    ci_low: float | None = None
    ci_high: float | None = None


class Interference(Strict):
    """At one concurrency: throughput and p95 TTFT / ITL of the lane under the others' load."""

    concurrency: int
    output_tok_per_s: Ratio = Field(description="< 1: the lane lost throughput")
    p95_ttft_ms: Ratio = Field(description="> 1: first tokens came later")
    p95_itl_ms: Ratio = Field(description="> 1: tokens came further apart")
    method: str = RATIO_METHOD


def _div(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def ratio_of_estimates(together: Estimate, solo: Estimate) -> Ratio:
    """t/s, CI [t_low / s_high, t_high / s_low] when both CIs exist."""
    return Ratio(value=_div(together.value, solo.value),
                 ci_low=_div(together.ci_low, solo.ci_high), ci_high=_div(together.ci_high, solo.ci_low))


def ratio_of_p95(together: Distribution, solo: Distribution) -> Ratio:
    """p95 ratio, CI from the order-statistic CIs of both p95s (open ends stay null)."""
    t_ci, s_ci = together.ci.get("p95"), solo.ci.get("p95")
    return Ratio(value=_div(together.p95, solo.p95),
                 ci_low=_div(t_ci.low if t_ci else None, s_ci.high if s_ci else None),
                 ci_high=_div(t_ci.high if t_ci else None, s_ci.low if s_ci else None))


def interference(solo: list[LevelResult], together: list[LevelResult]) -> list[Interference]:
    """One row per concurrency measured in both scenarios."""
    by_n = {lv.concurrency: lv for lv in solo}
    rows = []
    for t in together:
        s = by_n.get(t.concurrency)
        if s is None:
            continue
        rows.append(Interference(
            concurrency=t.concurrency,
            output_tok_per_s=ratio_of_estimates(t.throughput.output_tok_per_s, s.throughput.output_tok_per_s),
            p95_ttft_ms=ratio_of_p95(t.latency.ttft_ms, s.latency.ttft_ms),
            p95_itl_ms=ratio_of_p95(t.latency.itl_ms, s.latency.itl_ms),
        ))
    return rows
