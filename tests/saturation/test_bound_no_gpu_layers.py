"""What saturated a lane whose server keeps every layer on the CPU (--n-gpu-layers 0) on a host with
GPUs: the GPUs' figures do not classify it (it is the no-GPU case), and it is not said to split its
layers over them. A running server (--url, devices unknown) *may* split over the host's GPUs: said so."""

from __future__ import annotations

import pytest

from satbench.saturation.bound import gpu_devices, saturated_by
from tests.builders import replaced

TWO_GPUS = "CUDA0: NVIDIA H200; CUDA1: NVIDIA H200"


def _lane_and_level(results, n_gpu_layers, backend=TWO_GPUS, util=2.0, cpu=1.95):
    lane = results.lanes[0]
    params = lane.server_params.model_copy(update={"n_gpu_layers": n_gpu_layers, "n_threads": 2})
    lane = replaced(lane, {"runtime.backend": backend, "server_params": params})
    lv = next(lv for lv in lane.levels if lv.concurrency == 4)
    return lane, replaced(lv, {"gpu.util_mean_pct": util, "occupancy.requests_deferred_max": 0.0,
                               "memory.server_cpu_cores": cpu})


def test_no_layers_offloaded_uses_no_gpu(flat_run):
    lane, lv = _lane_and_level(flat_run, 0)
    assert gpu_devices(lane) == 0
    sat = saturated_by(lane, lv)
    assert sat.resource == "server_cpu", sat.statement
    assert "--n-gpu-layers 0" in sat.statement and "CPU-bound" in sat.statement
    assert "splits its layers" not in sat.statement and "busiest of 2 GPUs" not in sat.statement


@pytest.mark.parametrize("util", [95.0, 70.0, 30.0])
def test_the_hosts_gpu_figures_do_not_classify_a_cpu_only_server(flat_run, util):
    """A GPU kept busy by another process is not this server's bound; idle, it proves nothing either:
    only the server's own CPU use decides."""
    lane, lv = _lane_and_level(flat_run, 0, util=util, cpu=0.4)
    sat = saturated_by(lane, lv)
    assert sat.resource == "undetermined" and "--n-gpu-layers 0" in sat.statement, sat.statement
    assert "GPU-bound" not in sat.statement.split("; ")[-1]
    assert sat.gpu_util_pct == util  # the figure is still reported
    lv = replaced(lv, {"memory.server_cpu_cores": 1.9})
    assert saturated_by(lane, lv).resource == "server_cpu"


@pytest.mark.parametrize("ngl", [None, -1, 99])
def test_an_offloading_server_keeps_its_verdicts(flat_run, ngl):
    lane, lv = _lane_and_level(flat_run, ngl, util=50.0)
    assert gpu_devices(lane) == 2
    sat = saturated_by(lane, lv)
    assert sat.resource == "undetermined" and "the server splits its layers over 2 GPUs" in sat.statement
    lv = replaced(lv, {"gpu.util_mean_pct": 95.0})
    assert saturated_by(lane, lv).resource == "gpu"
    lane = replaced(lane, {"runtime.backend": "CUDA0: NVIDIA H200"})
    lv = replaced(lv, {"gpu.util_mean_pct": 30.0})
    assert saturated_by(lane, lv).resource == "server_cpu"


def test_a_running_server_may_split_over_the_hosts_gpus(flat_run):
    lane, lv = _lane_and_level(flat_run, None, backend=None, util=50.0)
    assert len(lane.hardware.gpus) == 2 and gpu_devices(lane) == 2
    sat = saturated_by(lane, lv)
    assert sat.resource == "undetermined"
    assert "may split its layers over the 2 GPUs this host has" in sat.statement
    assert "the server splits" not in sat.statement
