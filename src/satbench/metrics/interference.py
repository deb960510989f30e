"""Cross-lane interference: a lane's figures when all lanes run together ÷ its solo figures; CIs as
docs/definitions.md#p95-across-repetitions states them."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from satbench.metrics.level_result import LevelResult
from satbench.metrics.stats import Estimate, mean_estimate
from satbench.records.record import Record

RATIO_METHOD = ("together ÷ solo; CI by interval arithmetic on the two 95 % CIs (conservative); a p95's CI "
                "is Student-t over the repetitions' own p95s (none from fewer than 2 repetitions)")
P95_CI_METHOD = "t over repetitions' own p95s, widened to contain the pooled p95"

P95Metric = Literal["p95_ttft_ms", "p95_itl_ms", "p95_e2e_ms"]


class Ratio(Record):
    value: float | None
    ci_low: float | None = None
    ci_high: float | None = None


class Interference(Record):
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


def p95_estimate(level: LevelResult, metric: P95Metric) -> Estimate:
    """The level's pooled p95 with a 95 % CI that carries repetition-to-repetition variation:
    mean ± t(0.975, k−1)·s/√k over the k repetitions' own p95s (floored at 0), widened to contain
    the pooled p95; no CI from fewer than 2 repetitions. (The pooled p95's order-statistic CI treats
    every sample as independent, so it misses how much a whole repetition moves.)"""
    pooled = getattr(level.latency, metric.removeprefix("p95_")).p95
    per_rep = [v for r in level.repetitions if (v := getattr(r, metric)) is not None]
    t = mean_estimate(per_rep, P95_CI_METHOD, floor=0.0)
    if pooled is None or t.ci_low is None or t.ci_high is None:
        return Estimate(value=pooled, n=len(per_rep), ci_method="none (fewer than 2 repetitions with a p95)")
    return Estimate(value=pooled, ci_low=min(t.ci_low, pooled), ci_high=max(t.ci_high, pooled),
                    n=len(per_rep), ci_method=P95_CI_METHOD)


def ratio_of_p95(together: LevelResult, solo: LevelResult, metric: P95Metric) -> Ratio:
    """Pooled p95 ratio; CI [t_low / s_high, t_high / s_low] on the two levels' `p95_estimate`s
    (an end dividing by a CI end of 0, or missing, stays null)."""
    return ratio_of_estimates(p95_estimate(together, metric), p95_estimate(solo, metric))


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
            p95_ttft_ms=ratio_of_p95(t, s, "p95_ttft_ms"),
            p95_itl_ms=ratio_of_p95(t, s, "p95_itl_ms"),
        ))
    return rows
