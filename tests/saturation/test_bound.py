"""What saturated: GPU-bound, server-CPU-bound and slot/queue-bound saturation are told apart,
from a real sweep of the fake server (its throughput flattens past N=2) with a fake NVML
(`flat_run`, tests/saturation/conftest.py)."""

from __future__ import annotations

from satbench.saturation.bound import saturated_by
from satbench.saturation.recommend import recommend_lane
from tests.builders import replaced


def _copy(results):
    """The fake NVML shows two GPUs; the server (as its backend says) computes on one of them."""
    return replaced(results.model_copy(deep=True), {"lanes.0.runtime.backend": "CUDA0: NVIDIA H200"})


def test_low_gpu_utilisation_while_throughput_is_flat_is_server_cpu_bound(flat_run):
    results = _copy(flat_run)
    rec = recommend_lane(results.lanes[0], results)
    assert rec.knee == 2 and rec.binding.reason == "knee"
    assert rec.binding.resource == "server_cpu" and rec.saturation.at_concurrency == 4
    assert rec.saturation.gpu_util_pct == 30.0
    assert "GPU 30 % busy" in rec.binding.detail and "not the GPU" in rec.binding.detail


def test_a_busy_gpu_is_gpu_bound(flat_run):
    results = _copy(flat_run)
    results = replaced(results, {"lanes.0.levels": [replaced(lv, {"gpu.util_mean_pct": 96.0})
                                                    for lv in results.lanes[0].levels]})
    rec = recommend_lane(results.lanes[0], results)
    assert rec.binding.reason == "knee" and rec.binding.resource == "gpu"
    assert "GPU-bound" in rec.saturation.statement


def test_queued_requests_are_slot_bound_whatever_the_gpu_says(flat_run):
    results = _copy(flat_run)
    k = [lv.concurrency for lv in results.lanes[0].levels].index(4)
    results = replaced(results, {f"lanes.0.levels.{k}.gpu.util_mean_pct": 96.0,
                                 f"lanes.0.levels.{k}.occupancy.requests_deferred_max": 2.0})
    lane = results.lanes[0]
    rec = recommend_lane(lane, results)
    assert rec.binding.resource == "slots" and "deferred" in rec.saturation.statement
    # and without deferral, 4 offered to 2 slots that are full is the same finding
    lane = replaced(lane, {f"levels.{k}.occupancy.requests_deferred_max": 0.0, "runtime.total_slots": 2})
    sat = saturated_by(lane, lane.levels[k])
    assert sat.resource == "slots" and sat.busy_slots is not None


def test_in_between_utilisation_or_missing_figures_are_undetermined_not_guessed(flat_run):
    results = _copy(flat_run)
    lane = results.lanes[0]
    lv4 = next(lv for lv in lane.levels if lv.concurrency == 4)
    lv4 = replaced(lv4, {"gpu.util_mean_pct": 70.0})
    assert saturated_by(lane, lv4).resource == "undetermined"
    lane = replaced(lane, {"server_params.n_threads": 2})
    lv4 = replaced(lv4, {"gpu": None, "memory.server_cpu_cores": 1.9})  # CPU only: its CPU use decides
    sat = saturated_by(lane, lv4)
    assert sat.resource == "server_cpu" and "CPU backend" in sat.statement
    lv4 = replaced(lv4, {"memory.server_cpu_cores": 0.4})
    assert saturated_by(lane, lv4).resource == "undetermined"
    lv4 = replaced(lv4, {"memory.server_cpu_cores": None})
    assert saturated_by(lane, lv4).resource == "undetermined"
