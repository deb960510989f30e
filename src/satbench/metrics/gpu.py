"""GPU use per level (docs/metrics.md), from the sampler's NVML readings.

Figures are means over the process samples inside the level's steady windows (every
repetition's), so warm-up and ramp-down do not dilute utilisation; peak memory is taken over the
whole level, like RSS. NVML figures are device-wide (gpu.py): another process on the GPU counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import Field

from satbench.records.record import Record

if TYPE_CHECKING:  # reading results.json (its GpuUse) needs neither numpy nor the sample columns
    import numpy as np

    from satbench.records.samples import ProcessColumns, SampleColumns


class GpuUse(Record):
    samples: int = Field(description="NVML readings inside the steady windows")
    mem_used_mean_bytes: int | None = None
    mem_used_peak_bytes: int | None = Field(None, description="over the whole level, warm-up included")
    util_mean_pct: float | None = Field(None, description="mean NVML utilisation of the busiest GPU")
    util_max_pct: float | None = None
    sm_clock_mean_mhz: float | None = None


def _inside(samples: ProcessColumns, spans: Sequence[tuple[int, int]]) -> tuple[SampleColumns, np.ndarray]:
    """The table, and its good readings inside any of `spans`, in file order."""
    from satbench.records.samples import as_columns

    c = as_columns(samples, "process")
    rows = c.in_spans(spans)
    return c, rows[~c.failed()[rows]]


def _values(samples: ProcessColumns, spans: Sequence[tuple[int, int]], field: str) -> list:
    """The recorded values of `field` of the readings inside the spans, in file order."""
    import numpy as np

    c, rows = _inside(samples, spans)
    col = c.column(field)[rows]
    return col[~np.isnan(col) if col.dtype.kind == "f" else col >= 0].tolist()


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def gpu_util_mean_pct(samples: ProcessColumns, spans: Sequence[tuple[int, int]]) -> float | None:
    """Utilisation = mean of NVML `utilization.gpu` over the readings inside the spans, percent."""
    return _mean(_values(samples, spans, "gpu_util_pct"))


def gpu_sm_clock_mean_mhz(samples: ProcessColumns, spans: Sequence[tuple[int, int]]) -> float | None:
    """SM clock = mean of NVML's SM clock over the readings inside the spans, MHz (a falling clock
    under load means power or thermal throttling)."""
    return _mean(_values(samples, spans, "gpu_sm_clock_mhz"))


def gpu_mem_used_mean_bytes(samples: ProcessColumns, spans: Sequence[tuple[int, int]]) -> int | None:
    """GPU memory used = mean of NVML `memory.used` over the readings inside the spans, bytes."""
    m = _mean([float(v) for v in _values(samples, spans, "gpu_mem_used_bytes")])
    return None if m is None else round(m)


def gpu_use(samples: ProcessColumns, windows: Sequence[tuple[int, int]],
            peak_mem_bytes: int | None) -> GpuUse | None:
    """The level's GPU block; None when no NVML reading exists at all (no GPU: unavailable, not 0)."""
    import numpy as np

    c, rows = _inside(samples, windows)
    readings = rows[c.column("gpu_mem_used_bytes")[rows] >= 0]
    if not len(readings) and peak_mem_bytes is None:
        return None
    utils = c.column("gpu_util_pct")[readings]
    utils = utils[~np.isnan(utils)]
    return GpuUse(
        samples=len(readings), mem_used_mean_bytes=gpu_mem_used_mean_bytes(c, windows),
        mem_used_peak_bytes=peak_mem_bytes, util_mean_pct=gpu_util_mean_pct(c, windows),
        util_max_pct=float(utils.max()) if len(utils) else None,
        sm_clock_mean_mhz=gpu_sm_clock_mean_mhz(c, windows),
    )
