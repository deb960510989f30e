"""What saturated a lane: the GPU, the server's CPU side, or its slots, a queue
(docs/definitions.md#what-saturated).

Read at the first measured level past the knee, where adding requests stopped adding
throughput. In order:
1. slots: the server queued requests (`requests_deferred` > 0), or more requests were offered
   than it has slots and ≥ 90 % of its slots were busy: the extra requests only wait.
2. gpu: the busiest GPU ran kernels ≥ 80 % of the time (NVML utilisation): the GPU is the limit.
3. server_cpu: the GPU was busy ≤ 60 % of the time while throughput stayed flat, so the work
   between kernels (sampling over the vocabulary, the scheduling loop, HTTP and JSON) is; or,
   with no GPU, the server kept ≥ 80 % of its threads' cores busy (the CPU backend computes).
4. undetermined: figures missing or in between (60–80 % GPU utilisation), each figure named.

A server started with `--n-gpu-layers 0` keeps every layer on the CPU: whatever NVML says of the
host's GPUs (another process, or llama.cpp's prompt-batch op offload) does not classify it; it is
read as the no-GPU case. `n_gpu_layers` None is llama.cpp's default (all layers on a GPU build).

NVML's utilisation is that of the busiest GPU (gpu.py). When the server splits its layers over
several GPUs (llama.cpp's default with more than one visible), a decode step runs through them one
after another, so each is idle while the others compute: the busiest at ≤ 60 % no longer says the
GPU side is idle. There, ≥ 80 % still means GPU-bound (one device is the bottleneck); below it the
GPU-vs-CPU question is undetermined and the statement says why. A running server's (--url) devices
are unknown: the GPUs NVML sees on the host are those it may split over, and it is said so.
"""

from __future__ import annotations

from typing import Literal

from satbench.analysis.results import LaneResult
from satbench.config.schema import Strict
from satbench.metrics.level_result import LevelResult
from satbench.server.memlog import gpu_device_count

Resource = Literal["gpu", "server_cpu", "slots", "undetermined"]
GPU_BUSY_PCT = 80.0
GPU_IDLE_PCT = 60.0
SLOTS_FULL = 0.9
CPU_FULL = 0.8


class Saturation(Strict):
    resource: Resource
    at_concurrency: int
    gpu_util_pct: float | None
    gpu_sm_clock_mhz: float | None
    server_cpu_cores: float | None
    server_threads: int | None
    busy_slots: float | None
    slots: int | None
    requests_deferred_max: float | None
    statement: str


def server_threads(lane: LaneResult) -> int | None:
    """Cores the server may compute on: its --threads, else the machine's physical (else logical)
    cores, at most the cores this process may use (affinity, cgroup quota), which the server inherits."""
    h = lane.hardware
    cores = h.cores_physical or h.cores_logical
    return lane.server_params.n_threads or (min(cores, h.cores_usable) if h.cores_usable else cores)


def offloads_layers(lane: LaneResult) -> bool:
    """False when the server was started with --n-gpu-layers 0 (every layer on the CPU); None (llama.cpp's
    default: all layers on a GPU build) or any other count offloads."""
    return lane.server_params.n_gpu_layers != 0


def gpu_devices(lane: LaneResult) -> int:
    """GPUs the server may split its layers over: none with --n-gpu-layers 0; else the GPU devices its
    backend lists ("CUDA0: NVIDIA H200; CUDA1: …" from llama-server --list-devices, or the embedded
    server's device list), else, when the backend is unknown (a url lane), the GPUs NVML sees on this host."""
    if not offloads_layers(lane):
        return 0
    backend = lane.runtime.backend
    if backend is None:
        return len(lane.hardware.gpus)
    return gpu_device_count(backend)


def busy_slots(lv: LevelResult) -> float | None:
    """Busy slots = the decode-weighted figure, else the time-weighted one (see busy_slots_variant)."""
    o = lv.occupancy
    return (o.decode_weighted_busy_slots if o.decode_weighted_busy_slots is not None
            else o.time_weighted_busy_slots)


BusyVariant = Literal["per decode", "time-weighted"]  # which figure busy_slots is


def busy_slots_variant(lv: LevelResult) -> BusyVariant | Literal[""]:
    """Which figure busy_slots(lv) is: "per decode", "time-weighted", or "" when neither exists."""
    o = lv.occupancy
    return ("per decode" if o.decode_weighted_busy_slots is not None
            else "time-weighted" if o.time_weighted_busy_slots is not None else "")


def _gpu_figure(lane: LaneResult, lv: LevelResult, util: float | None, clock: float | None,
                devices: int) -> str:
    if util is not None:
        on = (f" (busiest of {devices} GPUs)" if devices > 1
              else "" if offloads_layers(lane) else " (no layers on it: --n-gpu-layers 0)")
        return f"GPU {util:.0f} % busy{on}" + (f" at {clock:.0f} MHz SM" if clock else "")
    if lv.gpu is not None:
        return "GPU present, utilisation not reported by NVML (MIG/vGPU?)"
    return "no GPU utilisation (no GPU through NVML)"


def saturated_by(lane: LaneResult, lv: LevelResult) -> Saturation:
    """Classify what limits throughput at level `lv` (the first level past the knee)."""
    slots, busy, deferred = lane.runtime.total_slots, busy_slots(lv), lv.occupancy.requests_deferred_max
    util = lv.gpu.util_mean_pct if lv.gpu is not None else None
    clock = lv.gpu.sm_clock_mean_mhz if lv.gpu is not None else None
    cpu, threads = lv.memory.server_cpu_cores, server_threads(lane)
    n, devices, on_gpu = lv.concurrency, gpu_devices(lane), offloads_layers(lane)
    figures = [f"{busy:.1f} of {slots} slots busy ({busy_slots_variant(lv)})" if busy is not None and slots
               else "busy slots n/a", _gpu_figure(lane, lv, util, clock, devices),
               f"server CPU {cpu:.2f} of {threads} cores" if cpu is not None else "server CPU n/a"]
    if deferred is None or deferred:
        figures.insert(1, "deferred requests n/a" if deferred is None else f"up to {deferred:.0f} "
                                                                           "request(s) deferred")
    said = f"at N={n}: " + ", ".join(figures)
    queue = bool(deferred) or bool(slots and n > slots and busy is not None and busy >= SLOTS_FULL * slots)
    if queue:
        resource: Resource = "slots"
        why = "the server's slots are full and requests queue: slot/queue-bound"
    elif on_gpu and util is not None and util >= GPU_BUSY_PCT:
        resource, why = "gpu", f"the GPU runs kernels ≥ {GPU_BUSY_PCT:.0f} % of the time: GPU-bound"
    elif on_gpu and util is not None and devices > 1:
        resource = "undetermined"
        split = (f"the server splits its layers over {devices} GPUs, which a decode step runs"
                 if lane.runtime.backend
                 else f"the server may split its layers over the {devices} GPUs this host has (a running "
                      "server's devices are not known), which a decode step would run")
        why = (f"{split} through one after another: the busiest under {GPU_BUSY_PCT:.0f} % cannot tell a "
               "GPU-bound lane from a CPU-bound one")
    elif on_gpu and util is not None and util <= GPU_IDLE_PCT:
        resource = "server_cpu"
        why = (f"the GPU is idle ≥ {100 - GPU_IDLE_PCT:.0f} % of the time while throughput is flat: bound "
               "by the server's CPU side (sampling over the vocabulary, scheduling loop, HTTP), not the GPU")
    elif (lv.gpu is None or not on_gpu) and cpu is not None and threads and cpu >= CPU_FULL * threads:
        resource = "server_cpu"
        why = (f"{'no GPU' if on_gpu else 'no layers on the GPU (--n-gpu-layers 0)'}, and the server keeps "
               "its cores busy: CPU-bound (CPU backend)")
    else:
        resource = "undetermined"
        why = ("no layers on the GPU (--n-gpu-layers 0), and the server's CPU use "
               f"{'not measured' if cpu is None else 'under ' + format(CPU_FULL, '.0%') + ' of its cores'}: "
               "not enough figures to say what saturated" if not on_gpu
               else f"GPU utilisation between {GPU_IDLE_PCT:.0f} and {GPU_BUSY_PCT:.0f} %: neither clearly "
                    "GPU- "
               "nor CPU-bound" if util is not None
               else "the GPU reports no utilisation (MIG or vGPU?): not enough figures to say what saturated"
               if lv.gpu is not None else "not enough figures to say what saturated")
    return Saturation(resource=resource, at_concurrency=n, gpu_util_pct=util, gpu_sm_clock_mhz=clock,
                      server_cpu_cores=cpu, server_threads=threads, busy_slots=busy, slots=slots,
                      requests_deferred_max=deferred, statement=f"{said}; {why}")
