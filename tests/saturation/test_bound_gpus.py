"""What saturated, told honestly: a GPU that reports no utilisation (MIG, vGPU) is not "no GPU" (D3);
a layer split over several GPUs makes the busiest one's low utilisation no proof of a CPU bound
(D4); the busy-slots figure names its variant and is public for the server confirmation (D6)."""

from __future__ import annotations

from satbench.saturation.bound import busy_slots, busy_slots_variant, gpu_devices, saturated_by
from tests.builders import replaced

ONE_GPU = "CUDA0: NVIDIA H200"
TWO_GPUS = "CUDA0: NVIDIA H200; CUDA1: NVIDIA H200"


def _lane_and_level(results, backend=ONE_GPU, util=30.0):
    lane = replaced(results.lanes[0], {"runtime.backend": backend})
    lv = next(lv for lv in lane.levels if lv.concurrency == 4)
    return lane, replaced(lv, {"gpu.util_mean_pct": util, "occupancy.requests_deferred_max": 0.0})


def test_a_gpu_without_utilisation_is_present_not_missing(flat_run):
    lane, lv = _lane_and_level(flat_run, util=None)
    assert lv.gpu is not None and lv.gpu.mem_used_peak_bytes
    sat = saturated_by(lane, lv)
    assert "GPU present, utilisation not reported by NVML (MIG/vGPU?)" in sat.statement
    assert "no GPU through NVML" not in sat.statement and sat.resource == "undetermined"
    lv = replaced(lv, {"gpu": None})  # really no GPU: the old words stay
    assert "no GPU through NVML" in saturated_by(lane, lv).statement


def test_a_layer_split_over_two_gpus_at_half_each_is_not_called_cpu_bound(flat_run):
    lane, lv = _lane_and_level(flat_run, backend=TWO_GPUS, util=50.0)
    assert gpu_devices(lane) == 2
    sat = saturated_by(lane, lv)
    assert sat.resource == "undetermined"
    assert "2 GPUs" in sat.statement and "busiest of 2 GPUs" in sat.statement
    lv = replaced(lv, {"gpu.util_mean_pct": 95.0})  # one device busy ≥ 80 %: still the bottleneck
    assert saturated_by(lane, lv).resource == "gpu"
    # a url lane (backend unknown) on a host where NVML sees two GPUs cannot say which the server uses
    lane = replaced(lane, {"runtime.backend": None})
    lv = replaced(lv, {"gpu.util_mean_pct": 50.0})
    assert len(lane.hardware.gpus) == 2 and saturated_by(lane, lv).resource == "undetermined"


def test_a_single_gpu_lane_keeps_its_verdicts(flat_run):
    lane, lv = _lane_and_level(flat_run, backend=ONE_GPU, util=50.0)
    assert gpu_devices(lane) == 1 and saturated_by(lane, lv).resource == "server_cpu"
    lv = replaced(lv, {"gpu.util_mean_pct": 95.0})
    assert saturated_by(lane, lv).resource == "gpu"
    lv = replaced(lv, {"gpu.util_mean_pct": 70.0})
    assert saturated_by(lane, lv).resource == "undetermined"
    # the embedded runtime's device list counts the same way; a CPU-only backend has no GPU
    lane = replaced(lane, {"runtime.backend": "CPU (AMD EPYC 9654), CUDA0 (NVIDIA H200)"})
    assert gpu_devices(lane) == 1
    lane = replaced(lane, {"runtime.backend": "CPU"})
    assert gpu_devices(lane) == 0


def test_busy_slots_is_public_and_names_its_variant(flat_run):
    lane, lv = _lane_and_level(flat_run)
    lv = replaced(lv, {"occupancy.decode_weighted_busy_slots": None,
                       "occupancy.time_weighted_busy_slots": 0.7})
    assert busy_slots(lv) == 0.7 and busy_slots_variant(lv) == "time-weighted"
    assert f"0.7 of {lane.runtime.total_slots} slots busy (time-weighted)" in saturated_by(lane, lv).statement
    lv = replaced(lv, {"occupancy.decode_weighted_busy_slots": 3.9})
    assert busy_slots(lv) == 3.9 and busy_slots_variant(lv) == "per decode"
    lv = replaced(lv, {"occupancy.decode_weighted_busy_slots": None,
                       "occupancy.time_weighted_busy_slots": None})
    assert busy_slots(lv) is None and "busy slots n/a" in saturated_by(lane, lv).statement
