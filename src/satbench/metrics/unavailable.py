"""Why a level's figure is null: the server cannot give it, or the sampler's reading failed
(recorded error samples, a poller that gave up, NVML). Never reported as zero."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from satbench.metrics.level_result import LevelContext, LevelResult
from satbench.metrics.memory import cpu_why
from satbench.records.events import GPU_FAILED, STOPPED, MetricsSample, SlotsSample
from satbench.records.samples import MetricsColumns, ProcessColumns, SampleColumns, SlotsColumns, as_columns


def _kind(samples: Sequence[MetricsSample | SlotsSample]) -> str:
    return samples[0].kind if samples else "metrics"


def _end(intervals: list[tuple[int, int]]) -> int | None:
    return max((hi for _, hi in intervals), default=None)


def nvml_failure(samples: ProcessColumns, intervals: list[tuple[int, int]]) -> str | None:
    """The latest failed NVML reading up to the level's end (error GPU_FAILED…), without the prefix."""
    c = as_columns(samples, "process")
    if (end := _end(intervals)) is None:
        return None
    failed = np.nonzero(c.errors_starting(GPU_FAILED)[:c.upto(end)])[0]
    return c.error_of(int(failed[-1]))[len(GPU_FAILED):] if len(failed) else None  # type: ignore[index]


CPU_FIGURES = {"server_cpu_cores": "cpu_seconds", "host_busy_cores": "host_busy_cpu_seconds",
               "client_cpu_cores": "client_cpu_seconds"}


def cpu_failures(samples: ProcessColumns, intervals: list[tuple[int, int]]) -> dict[str, str]:
    """Per CPU figure of the level (memory.server_cpu_cores, …): why its first repetition without a
    value has none (memory.cpu_why), e.g. readings from two server processes or a counter that went back."""
    out: dict[str, str] = {}
    for key, field in CPU_FIGURES.items():
        why = next((w for lo, hi in intervals if (w := cpu_why(samples, lo, hi, field)) is not None), None)
        if why is not None:
            out[key] = why
    return out


def endpoint_failures(samples: MetricsColumns | SlotsColumns, intervals: list[tuple[int, int]]) -> str:
    """' (/metrics failed: HTTP 500, 14 of 14 polls in this level)' when polls inside the level's
    intervals recorded errors; ' (/metrics not polled in this level: satbench stopped polling after 20 …)'
    when none lie inside and the latest before it failed (the poller gave up); '' otherwise.
    Says *why* a figure is missing, not only that it is."""
    c = samples if isinstance(samples, SampleColumns) else as_columns(samples, _kind(samples))
    rows = c.in_spans(intervals)
    polls = [e for i in rows.tolist() if not (e := c.error_of(i) or "").startswith(STOPPED)]
    errors = Counter(e for e in polls if e)
    end = _end(intervals)
    up_to = c.upto(end) if end is not None else 0
    last_error = c.error_of(up_to - 1) if up_to else None
    name = "/metrics" if c.kind == "metrics" else "/slots"
    if errors:
        top = errors.most_common(1)[0][0]
        stopped = "; then satbench stopped polling it" if (last_error or "").startswith(STOPPED) else ""
        return f" ({name} failed: {top}, {sum(errors.values())} of {len(polls)} polls in this level{stopped})"
    if polls or not last_error:
        return ""
    if last_error.startswith(STOPPED):
        return f" ({name} not polled in this level: satbench {last_error})"
    return f" ({name} not polled in this level; its last poll before it failed: {last_error})"


def unavailable_figures(ctx: LevelContext, r: LevelResult, metrics_why: str = "", slots_why: str = "",
                        decode_why: str | None = None, gpu_why: str | None = None,
                        cpu_reasons: dict[str, str] | None = None) -> dict[str, str]:
    """Figures that are null because the server cannot provide them (never reported as zero);
    `metrics_why` / `slots_why` carry the sampler's recorded failures, if any; `decode_why` why
    the decode-weighted figure is missing (occupancy.decode_weighted); `gpu_why` the sampler's latest
    failed NVML reading, if any; `cpu_reasons` why each null CPU figure is null (cpu_failures)."""
    out = _server_figures(ctx, r, metrics_why, slots_why, decode_why)
    if r.memory.peak_rss_bytes is None:
        out["peak_rss_bytes"] = "server process not local or not sampled"
    out |= _cpu_figures(r, cpu_reasons or {})
    out |= _gpu_figures(ctx, r, gpu_why)
    return out


def _server_figures(ctx: LevelContext, r: LevelResult, metrics_why: str, slots_why: str,
                    decode_why: str | None) -> dict[str, str]:
    """The llama.cpp-only figures: all of them for another server, else those its endpoints did not give."""
    if not ctx.llamacpp:
        why = "not a llama.cpp server (no /props): llama.cpp-only figure"
        return dict.fromkeys(("queue_time_ms", "time_weighted_busy_slots", "decode_weighted_busy_slots",
                              "requests_deferred_max", "slots"), why)
    out: dict[str, str] = {}
    if r.occupancy.time_weighted_busy_slots is None:
        out["time_weighted_busy_slots"] = ("no /slots or requests_processing samples in the window"
                                           + (slots_why or metrics_why))
    if r.occupancy.decode_weighted_busy_slots is None:
        out["decode_weighted_busy_slots"] = ((decode_why or "fewer than two /metrics samples in the window")
                                             + metrics_why)
    if r.occupancy.requests_deferred_max is None:
        out["requests_deferred_max"] = "no /metrics samples in the window" + metrics_why
    if r.latency.queue_time_ms.n == 0:
        out["queue_time_ms"] = "the server reported no prompt_ms timings"
    return out


def _cpu_figures(r: LevelResult, cpu_reasons: dict[str, str]) -> dict[str, str]:
    """Why each null CPU figure is null: the recorded reason, else the default for it."""
    out: dict[str, str] = {}
    for key in CPU_FIGURES:
        if getattr(r.memory, key) is None:
            default = ("no two readings of the one server process that ran the level (not started by "
                       "satbench, not sampled, or readings of different processes)"
                       if key == "server_cpu_cores" else "no two readings of the one satbench process that "
                                                         "ran the level")
            out[key] = cpu_reasons.get(key) or default
    return out


def _gpu_figures(ctx: LevelContext, r: LevelResult, gpu_why: str | None) -> dict[str, str]:
    """No GPU memory: why (a remote server, NVML failed, no GPU); a GPU without utilisation readings."""
    if r.memory.peak_gpu_mem_bytes is None:
        why = ("the server runs on another machine (url lane, remote network path): its GPU is not visible "
               "to satbench, and this machine's was not sampled" if ctx.server_remote
               else f"NVML failed: {gpu_why}" if gpu_why else "no GPU visible through NVML")
        return {"peak_gpu_mem_bytes": why, "gpu": why}
    if r.gpu is not None and r.gpu.util_mean_pct is None:
        why = ("GPU present, utilisation not reported by NVML (MIG/vGPU?): "
               f"{r.gpu.samples} memory reading(s) in the steady window, none with utilisation"
               if r.gpu.samples else "NVML gave no reading inside the steady window")
        return {"gpu_util_pct": why}
    return {}
