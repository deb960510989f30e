"""The binomial and Student-t quantiles of the CIs, and the Student-t CDF of the Welch tests, checked
against scipy (which they replace)."""

import math

import numpy as np
import pytest
from scipy import special, stats

from satbench.metrics.quantiles import T_975, binomial_quantile, t_cdf, t_quantile_975
from satbench.metrics.stats import CONFIDENCE, PERCENTILES

ALPHA = 1.0 - CONFIDENCE
QS = (ALPHA / 2, 1 - ALPHA / 2)  # the ranks percentile_ci asks for


@pytest.mark.parametrize("pct", [*PERCENTILES, 1, 25, 75, 99.9])
def test_binomial_quantile_is_scipys_for_every_sample_size_up_to_600(pct):
    ns = np.arange(1, 601)
    for q in QS:
        expected = stats.binom.ppf(q, ns, pct / 100.0).astype(int)
        assert [binomial_quantile(q, int(n), pct / 100.0) for n in ns] == list(expected), q


@pytest.mark.parametrize("n", [1_000, 4_097, 65_536, 131_000, 1_000_003])
def test_binomial_quantile_is_scipys_for_large_samples(n):
    for pct in PERCENTILES:
        for q in (*QS, 0.3, 0.7):
            assert binomial_quantile(q, n, pct / 100.0) == int(stats.binom.ppf(q, n, pct / 100.0))


def test_binomial_quantile_refuses_what_has_none():
    for q, n, p in ((0.0, 5, 0.5), (1.0, 5, 0.5), (0.5, 0, 0.5), (0.5, 5, 0.0), (0.5, 5, 1.0)):
        with pytest.raises(ValueError):
            binomial_quantile(q, n, p)


def test_the_t_table_is_scipys_bit_for_bit():
    assert 0.5 + CONFIDENCE / 2 == 0.975  # the table is for a 95 % CI
    assert tuple(float(stats.t.ppf(0.975, df)) for df in range(1, len(T_975) + 1)) == T_975
    assert t_quantile_975(len(T_975) + 1) == float(special.stdtrit(len(T_975) + 1, 0.975))


@pytest.mark.parametrize("df", [0.7, 1.0, 1.9, 2.0, 3.3, 7.5, 29.0, 150.2, 2400.0])
def test_the_t_cdf_is_scipys_over_the_welch_range(df):
    from scipy import stats

    for t in [-150.0, -12.5, -3.1, -1.96, -0.4, -1e-6, 0.0, 2e-7, 0.25, 1.0, 2.7, 9.0, 80.0]:
        assert t_cdf(t, df) == pytest.approx(float(stats.t.cdf(t, df)), abs=1e-10, rel=1e-9)


def test_the_t_cdf_is_the_closed_form_at_one_and_two_degrees_of_freedom():
    for t in [-30.0, -2.0, -4e-7, 0.3, 5.0]:
        assert t_cdf(t, 1.0) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-15)
        assert t_cdf(t, 2.0) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-15)
    assert t_cdf(math.inf, 3.0) == 1.0 and t_cdf(-math.inf, 3.0) == 0.0


def test_the_t_cdf_refuses_what_has_none():
    with pytest.raises(ValueError, match="df > 0"):
        t_cdf(1.0, 0.0)
    with pytest.raises(ValueError, match="df > 0"):
        t_cdf(math.nan, 3.0)
