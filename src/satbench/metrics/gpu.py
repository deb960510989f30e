"""GPU use per level (DESIGN.md §4 memory row, issue 8), from the sampler's NVML readings.

Figures are means over the process samples inside the level's steady windows (every
repetition's), so warm-up and ramp-down do not dilute utilisation; peak memory is taken over the
whole level, like RSS. NVML figures are device-wide (gpu.py): another process on the GPU counts.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from satbench.config.schema import Strict
from satbench.records.events import ProcessSample


class GpuUse(Strict):
    samples: int = Field(description="NVML readings inside the steady windows")
    mem_used_mean_bytes: int | None = None
    mem_used_peak_bytes: int | None = Field(None, description="over the whole level, warm-up included")
    util_mean_pct: float | None = Field(None, description="mean NVML utilisation of the busiest GPU")
    util_max_pct: float | None = None
    sm_clock_mean_mhz: float | None = None


def _inside(samples: Sequence[ProcessSample], spans: Sequence[tuple[int, int]]) -> list[ProcessSample]:
    return [s for s in samples if s.error is None and any(lo <= s.t_ns <= hi for lo, hi in spans)]


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def gpu_util_mean_pct(samples: Sequence[ProcessSample], spans: Sequence[tuple[int, int]]) -> float | None:
    """Utilisation = mean of NVML `utilization.gpu` over the readings inside the spans, percent."""
    return _mean([s.gpu_util_pct for s in _inside(samples, spans) if s.gpu_util_pct is not None])


def gpu_sm_clock_mean_mhz(samples: Sequence[ProcessSample], spans: Sequence[tuple[int, int]]) -> float | None:
    """SM clock = mean of NVML's SM clock over the readings inside the spans, MHz (a falling clock
    under load means power or thermal throttling)."""
    return _mean([s.gpu_sm_clock_mhz for s in _inside(samples, spans) if s.gpu_sm_clock_mhz is not None])


def gpu_mem_used_mean_bytes(samples: Sequence[ProcessSample], spans: Sequence[tuple[int, int]]) -> int | None:
    """GPU memory used = mean of NVML `memory.used` over the readings inside the spans, bytes."""
    m = _mean([float(s.gpu_mem_used_bytes) for s in _inside(samples, spans)
               if s.gpu_mem_used_bytes is not None])
    return None if m is None else round(m)


def gpu_use(samples: Sequence[ProcessSample], windows: Sequence[tuple[int, int]],
            peak_mem_bytes: int | None) -> GpuUse | None:
    """The level's GPU block; None when no NVML reading exists at all (no GPU: unavailable, not 0)."""
    readings = [s for s in _inside(samples, windows) if s.gpu_mem_used_bytes is not None]
    if not readings and peak_mem_bytes is None:
        return None
    utils = [s.gpu_util_pct for s in readings if s.gpu_util_pct is not None]
    return GpuUse(
        samples=len(readings), mem_used_mean_bytes=gpu_mem_used_mean_bytes(samples, windows),
        mem_used_peak_bytes=peak_mem_bytes, util_mean_pct=gpu_util_mean_pct(samples, windows),
        util_max_pct=max(utils) if utils else None, sm_clock_mean_mhz=gpu_sm_clock_mean_mhz(samples, windows),
    )
