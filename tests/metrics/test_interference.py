"""Interference ratios: together ÷ solo, with conservative CIs."""

import pytest

from satbench.metrics.interference import p95_estimate, ratio_of_estimates, ratio_of_p95
from satbench.metrics.level_result import (
    Counts,
    Latency,
    LevelResult,
    Memory,
    Occupancy,
    RepetitionResult,
    Throughput,
)
from satbench.metrics.stats import Distribution, Estimate, Interval


def test_throughput_ratio_and_ci():
    r = ratio_of_estimates(Estimate(value=50, ci_low=45, ci_high=55, n=3),
                           Estimate(value=100, ci_low=90, ci_high=110, n=3))
    assert r.value == pytest.approx(0.5)
    assert r.ci_low == pytest.approx(45 / 110) and r.ci_high == pytest.approx(55 / 90)
    no_ci = ratio_of_estimates(Estimate(value=50, n=1), Estimate(value=100, n=1))
    assert no_ci.value == pytest.approx(0.5) and no_ci.ci_low is None


def _level(p95: float, per_repetition: list[float]) -> LevelResult:
    d = Distribution(n=500, p95=p95, ci={"p95": Interval(low=p95 * 0.99, high=p95 * 1.01)})
    est = Estimate(value=1.0, n=1)
    return LevelResult(
        concurrency=1, repetitions=[RepetitionResult(repetition=i, status="complete", p95_ttft_ms=v)
                                    for i, v in enumerate(per_repetition, 1)],
        throughput=Throughput(output_tok_per_s=est, total_tok_per_s=est, req_per_s=est),
        latency=Latency(ttft_ms=d, itl_ms=d, tpot_ms=d, e2e_ms=d, queue_time_ms=d),
        occupancy=Occupancy(slots=1), memory=Memory(),
        counts=Counts(requests_measured=1, requests_ok=1, requests_in_window=1, warmup_requests=1, retries=0))


def test_p95_ratio_ci_is_t_over_the_repetitions_p95s_widened_to_the_pooled_p95():
    t, s = _level(300.0, [280.0, 300.0, 320.0]), _level(100.0, [90.0, 100.0, 104.0])
    t_est = p95_estimate(t, "p95_ttft_ms")
    half = 4.302653 * 20.0 / 3 ** 0.5
    assert t_est.value == 300.0 and t_est.ci_low == pytest.approx(300 - half) and t_est.n == 3
    s_est = p95_estimate(s, "p95_ttft_ms")
    assert s_est.ci_high >= 100.0 and s_est.ci_low < 90.0
    r = ratio_of_p95(t, s, "p95_ttft_ms")
    assert r.value == pytest.approx(3.0)
    assert r.ci_low == pytest.approx(t_est.ci_low / s_est.ci_high)
    assert r.ci_high == pytest.approx(t_est.ci_high / s_est.ci_low)
    pooled_outside = p95_estimate(_level(150.0, [100.0, 101.0, 102.0]), "p95_ttft_ms")
    assert pooled_outside.ci_high == 150.0


def test_p95_ratio_keeps_open_ends_open():
    """One repetition gives no CI; a t-interval floored at 0 gives an open upper end of the ratio."""
    one = ratio_of_p95(_level(300.0, [300.0]), _level(100.0, [90.0, 110.0]), "p95_ttft_ms")
    assert one.value == pytest.approx(3.0) and one.ci_low is None and one.ci_high is None
    r = ratio_of_p95(_level(300.0, [280.0, 320.0]), _level(100.0, [10.0, 190.0]), "p95_ttft_ms")
    assert r.ci_low is not None and r.ci_high is None
