"""F2's sizes follow the lane's calibrated rates: halved, ratios kept, while the largest would take
longer than F2_LARGEST_MAX_MS alone; never below (8, 2); the plan's without a calibration."""

from satbench.config.schema import LaneConfig, ServerParams, WorkloadConfig
from satbench.workload.fairness_plan import F2_LARGEST_MAX_MS, f2_sizes_for, make_plan

PLAN = make_plan(LaneConfig(workload=WorkloadConfig(prompt_tokens=64, output_tokens=32),
                            server=ServerParams(n_batch=512)), 4)


def _largest_ms(sizes, prefill_tok_per_s, itl_ms):
    return max(p / prefill_tok_per_s * 1000 + o * itl_ms for p, o in sizes)


def test_a_slow_lane_gets_halved_sizes_whose_largest_fits_the_target():
    assert PLAN.f2_sizes == [(32, 16), (64, 32), (128, 64), (256, 128)]
    # Gemma 3 270M on 2 cores: 226 tok/s prefill, 23.3 ms a lone decode step: 4.1 s for the largest
    sizes = f2_sizes_for(PLAN, 226.0, 23.3)
    assert sizes == [(16, 8), (32, 16), (64, 32), (128, 64)]
    assert _largest_ms(sizes, 226.0, 23.3) <= F2_LARGEST_MAX_MS < _largest_ms(PLAN.f2_sizes, 226.0, 23.3)


def test_a_fast_lane_or_no_calibration_keeps_the_plans_sizes():
    assert f2_sizes_for(PLAN, 2000.0, 7.0) == PLAN.f2_sizes
    assert f2_sizes_for(PLAN, None, 23.3) == PLAN.f2_sizes == f2_sizes_for(PLAN, 226.0, None)


def test_a_very_slow_lane_stops_halving_at_the_smallest_sizes():
    sizes = f2_sizes_for(PLAN, 10.0, 500.0)
    assert min(p for p, _ in sizes) >= 8 and min(o for _, o in sizes) >= 2
    assert sizes == [(8, 4), (16, 8), (32, 16), (64, 32)]  # halving again: a 4-token prompt
    assert len(set(sizes)) == len(sizes)
