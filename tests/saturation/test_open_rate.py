"""The highest open-loop rate within the SLO: judged on latencies from arrival like a closed-loop
level (upper CI ends of the p95s, attainment, no failures), unbounded rates neither setting nor
breaking it (saturation/open_rate.py)."""

from __future__ import annotations

from satbench.config.schema import SloConfig
from satbench.metrics.open_loop import RateResult
from satbench.metrics.stats import distribution
from satbench.saturation.open_rate import max_rate, standing

SLO = SloConfig(p95_ttft_ms=100.0, p95_tpot_ms=20.0)


def rate(rps: float, ttft_ms: float, n: int = 200, failed: int = 0, attainment: float = 1.0,
         status: str = "complete") -> RateResult:
    """A rate whose n requests all took `ttft_ms` (±1) from arrival and 10 ms per token."""
    ttft = distribution([ttft_ms + (i % 3) - 1 for i in range(n)])
    return RateResult(rate_rps=rps, position=1, max_concurrency=4, status=status, requests=n, ok=n - failed,
                      duration_s=n / rps, arrival_rps=rps, completed_rps=rps, output_tok_per_s=rps * 16,
                      goodput_rps=rps * attainment, slo_attainment=attainment, max_in_flight=3,
                      ttft_ms=ttft, ttft_from_arrival_ms=ttft, tpot_ms=distribution([10.0] * n),
                      e2e_from_arrival_ms=distribution([ttft_ms + 150] * n), wait_ms=distribution([0.0] * n))


def test_each_way_a_rate_can_miss():
    assert standing(rate(1, 50), SLO) == ("meets", [])
    assert standing(rate(1, 150), SLO)[0] == "misses"
    assert standing(rate(1, 50, failed=1), SLO) == ("misses", ["1 of 200 requests failed"])
    assert standing(rate(1, 50, attainment=0.8), SLO) == ("misses", ["attainment 80% < 90%"])
    assert standing(rate(1, 50, status="interrupted"), SLO)[1] == ["its run ended interrupted"]
    st, why = standing(rate(1, 50, n=40), SLO)  # 40 samples bound no p95
    assert st == "unbounded" and "needs 59" in why[0]
    e2e = SloConfig(p95_ttft_ms=100.0, p95_tpot_ms=20.0, p95_e2e_ms=180.0)
    assert standing(rate(1, 50), e2e)[1] == ["p95 E2E from arrival 200 ms > 180 ms"]


def test_the_highest_rate_before_the_first_miss():
    rec = max_rate([rate(8, 400), rate(2, 50), rate(4, 60)], SLO)
    assert rec.max_rate_rps == 4 and [r.rate_rps for r in rec.rates] == [2, 4, 8]
    assert rec.reason.startswith("4/s is shown to meet the SLO from arrival; 8/s misses the SLO: p95 TTFT")
    # a pass above a miss is not capacity
    assert max_rate([rate(2, 50), rate(4, 400), rate(8, 60)], SLO).max_rate_rps == 2


def test_unbounded_rates_neither_set_nor_break_it():
    rec = max_rate([rate(1, 50, n=40), rate(2, 50), rate(4, 50, n=40)], SLO)
    assert rec.max_rate_rps == 2
    assert "measure higher rates" in rec.reason and "not yet bounded: 1/s" in rec.reason


def test_none_without_an_slo_or_when_the_lowest_misses():
    assert max_rate([], SLO) is None
    rec = max_rate([rate(2, 50)], None)
    assert rec.max_rate_rps is None and "no SLO" in rec.reason and rec.rates[0].standing is None
    assert max_rate([rate(2, 500), rate(4, 50)], SLO).max_rate_rps is None
