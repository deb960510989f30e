"""Percentiles, their order-statistic CIs, and Student-t means."""

import pytest

from satbench.metrics.stats import distribution, mean_estimate, percentile, percentile_ci


def test_percentile_linear_interpolation():
    assert percentile([1, 2, 3, 4], 50) == pytest.approx(2.5)
    assert percentile(list(range(1, 101)), 95) == pytest.approx(95.05)


def test_percentile_ci_brackets_the_percentile_and_is_unbounded_for_tiny_samples():
    values = list(range(1, 1001))
    ci = percentile_ci(values, 95)
    assert ci.low < 950 < ci.high
    assert ci.low > 930 and ci.high < 970
    small = percentile_ci([1.0, 2.0, 3.0, 4.0, 5.0], 95)
    assert small.high is None  # 5 samples cannot bound a p95 from above


def test_distribution_flags_few_samples():
    d = distribution([float(x) for x in range(50)])
    assert d.n == 50 and d.few_samples and d.max == 49.0
    assert not distribution([1.0] * 100).few_samples
    empty = distribution([])
    assert empty.n == 0 and empty.p95 is None


def test_mean_estimate_t_interval():
    e = mean_estimate([10.0, 12.0, 14.0])
    assert e.value == pytest.approx(12.0)
    # s = 2, t(0.975, 2) = 4.3027 → half width 4.3027 * 2 / sqrt(3) = 4.968
    assert e.ci_high - e.value == pytest.approx(4.968, abs=1e-3)
    single = mean_estimate([5.0])
    assert single.ci_low is None and single.n == 1


def test_rates_never_get_a_negative_lower_bound():
    e = mean_estimate([1.0, 30.0, 2.0], floor=0.0)
    assert e.ci_low == 0.0 and e.ci_high > 30
    assert mean_estimate([1.0, 30.0, 2.0]).ci_low < 0  # without the floor the t-interval goes below 0
