"""Occupancy three ways, each exact on hand-made samples."""

import pytest

from satbench.metrics import occupancy
from satbench.metrics.window import SteadyWindow
from tests.builders import MS, ev, metrics, slots

W = SteadyWindow(start_ns=0, end_ns=1000 * MS)


def test_time_weighted_busy_slots_is_a_step_function_integral():
    samples = [slots(-50, [0]), slots(250, [0, 1]), slots(500, [0, 1, 2, 3]), slots(750, [])]
    # 1 slot for 250 ms, 2 for 250, 4 for 250, 0 for 250 → mean 1.75
    assert occupancy.time_weighted_busy_slots(samples, W) == pytest.approx(1.75)


def test_time_weighted_ignores_failed_samples_and_needs_one():
    assert occupancy.time_weighted_busy_slots([], W) is None
    bad = slots(100, [0, 1]).model_copy(update={"error": "timeout"})
    assert occupancy.time_weighted_busy_slots([bad], W) is None


def test_decode_weighted_uses_deltas_of_the_cumulative_mean():
    samples = [
        metrics(10, n_busy_slots_per_decode=1.0, n_decode_total=100),   # B = 100
        metrics(990, n_busy_slots_per_decode=2.0, n_decode_total=200),  # B = 400
    ]
    # ΔB / Δdecodes = 300 / 100 = 3 busy slots per decode inside the window
    assert occupancy.decode_weighted_busy_slots(samples, W) == pytest.approx(3.0)


def test_decode_weighted_needs_two_samples_and_a_decode():
    one = [metrics(10, n_busy_slots_per_decode=1.0, n_decode_total=100)]
    assert occupancy.decode_weighted_busy_slots(one, W) is None
    idle = one + [metrics(20, n_busy_slots_per_decode=1.0, n_decode_total=100)]
    assert occupancy.decode_weighted_busy_slots(idle, W) is None


def test_client_in_flight_counts_overlap_with_the_window():
    events = [
        ev(seq=0, sent_ms=-500, chunks_ms=[500]),   # 500 ms inside
        ev(seq=1, sent_ms=0, chunks_ms=[1000]),     # 1000 ms inside
        ev(seq=2, sent_ms=500, chunks_ms=[1500]),   # 500 ms inside
    ]
    assert occupancy.client_in_flight(events, W) == pytest.approx(2.0)
