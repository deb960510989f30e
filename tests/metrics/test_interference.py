"""Interference ratios: together ÷ solo, with conservative CIs."""

import pytest

from satbench.metrics.interference import ratio_of_estimates, ratio_of_p95
from satbench.metrics.stats import Distribution, Estimate, Interval


def test_throughput_ratio_and_ci():
    r = ratio_of_estimates(Estimate(value=50, ci_low=45, ci_high=55, n=3),
                           Estimate(value=100, ci_low=90, ci_high=110, n=3))
    assert r.value == pytest.approx(0.5)
    assert r.ci_low == pytest.approx(45 / 110) and r.ci_high == pytest.approx(55 / 90)
    no_ci = ratio_of_estimates(Estimate(value=50, n=1), Estimate(value=100, n=1))
    assert no_ci.value == pytest.approx(0.5) and no_ci.ci_low is None


def test_p95_ratio_keeps_open_ends_open():
    t = Distribution(n=50, p95=300.0, ci={"p95": Interval(low=280.0, high=None)})
    s = Distribution(n=500, p95=100.0, ci={"p95": Interval(low=95.0, high=110.0)})
    r = ratio_of_p95(t, s)
    assert r.value == pytest.approx(3.0)
    assert r.ci_low == pytest.approx(280 / 110) and r.ci_high is None
