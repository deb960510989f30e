"""The SLO's p95 upper bound is one-sided: the largest of ≥ 59 samples (below the p95 with probability
0.95ⁿ ≤ 5 %), the two-sided CI's upper end from 72; below 59 samples there is none."""

import random

from satbench.config.schema import SloConfig
from satbench.metrics.stats import distribution
from satbench.saturation.slo import fewest_to_bound_p95, p95_upper, slo_standing
from tests.builders import replaced
from tests.saturation.planner_fixtures import level

SLO = SloConfig(p95_ttft_ms=100, p95_tpot_ms=50)


def _with(n_samples: int, ttft_ms: list[float]):
    return replaced(level(1, [10.0, 10.1]), {"slo_attainment": 1.0, "latency.ttft_ms": distribution(ttft_ms),
                                              "latency.tpot_ms": distribution([5.0] * n_samples)})


def test_59_samples_bound_a_p95_and_58_do_not():
    assert fewest_to_bound_p95() == 59 and 0.95 ** 59 <= 0.05 < 0.95 ** 58
    assert p95_upper(distribution([10.0] * 58)) is None
    assert p95_upper(distribution(list(range(59)))) == 58.0  # the largest: the CI has no upper end yet
    d = distribution([float(i) for i in range(200)])
    assert p95_upper(d) == d.ci["p95"].high < d.max  # from 72 on, the CI's upper end


def test_a_level_of_59_samples_is_shown_to_meet_the_slo_and_one_of_58_is_unbounded():
    assert slo_standing([_with(59, [20.0] * 59)], SLO).bound == 1
    s = slo_standing([_with(58, [20.0] * 58)], SLO)
    assert s.bound is None and s.unbounded == ((1, 58),) and "below 59 samples" in s.why


def test_one_sample_over_the_target_among_59_is_a_miss_not_a_bound():
    """With 59 samples the bound is the largest: one over the target leaves the p95 unshown, and the
    level is seen to miss, as a two-sided CI end over the target is from 72 samples."""
    ttft = [20.0] * 58 + [150.0]
    random.Random(1).shuffle(ttft)
    s = slo_standing([_with(59, ttft)], SLO)
    assert s.bound is None and s.missed_at == 1 and "p95 TTFT upper CI 150 ms > 100" in s.why
