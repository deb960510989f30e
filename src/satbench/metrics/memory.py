"""Server memory and CPU per level (DESIGN.md §4), from process samples.

A level's samples are those inside [start, end] plus the nearest one on either side (the
sweep takes one at every level boundary), so a level shorter than the sampling period still
has its figures.
"""

from __future__ import annotations

from typing import Sequence

from satbench.events import ProcessSample


def level_samples(samples: Sequence[ProcessSample], start_ns: int, end_ns: int) -> list[ProcessSample]:
    """Good samples with start ≤ t ≤ end, plus the last one before start and the first after end."""
    good = sorted((s for s in samples if s.error is None), key=lambda s: s.t_ns)
    before = [s for s in good if s.t_ns < start_ns][-1:]
    inside = [s for s in good if start_ns <= s.t_ns <= end_ns]
    after = [s for s in good if s.t_ns > end_ns][:1]
    return before + inside + after


def peak_rss_bytes(samples: Sequence[ProcessSample], start_ns: int, end_ns: int) -> int | None:
    """Peak RSS = max rss_bytes over the level's samples (server process and its children)."""
    vals = [s.rss_bytes for s in level_samples(samples, start_ns, end_ns) if s.rss_bytes is not None]
    return max(vals) if vals else None


def peak_gpu_mem_bytes(samples: Sequence[ProcessSample], start_ns: int, end_ns: int) -> int | None:
    """Peak GPU memory used = max NVML memory.used over the level's samples (None without a GPU)."""
    vals = [s.gpu_mem_used_bytes for s in level_samples(samples, start_ns, end_ns)
            if s.gpu_mem_used_bytes is not None]
    return max(vals) if vals else None


def cpu_cores(samples: Sequence[ProcessSample], start_ns: int, end_ns: int, field: str = "cpu_seconds") -> float | None:
    """Cores used = Δ(cumulative CPU seconds in `field`) ÷ Δwall between the level's first and last samples."""
    pts = [s for s in level_samples(samples, start_ns, end_ns) if getattr(s, field) is not None]
    if len(pts) < 2:
        return None
    first, last = pts[0], pts[-1]
    wall_s = (last.t_ns - first.t_ns) / 1e9
    if wall_s <= 0:
        return None
    return (getattr(last, field) - getattr(first, field)) / wall_s


def server_cpu_utilisation(samples: Sequence[ProcessSample], start_ns: int, end_ns: int) -> float | None:
    """Server CPU = Δcpu_seconds ÷ Δwall of the server process tree, in cores."""
    return cpu_cores(samples, start_ns, end_ns, "cpu_seconds")


def host_busy_cores(samples: Sequence[ProcessSample], start_ns: int, end_ns: int) -> float | None:
    """Whole machine busy = Δ(total − idle − iowait CPU seconds) ÷ Δwall, in cores."""
    return cpu_cores(samples, start_ns, end_ns, "host_busy_cpu_seconds")


def client_cpu_cores(samples: Sequence[ProcessSample], start_ns: int, end_ns: int) -> float | None:
    """satbench's own process (load generator and sampler) = Δ its CPU seconds ÷ Δwall, in cores."""
    return cpu_cores(samples, start_ns, end_ns, "client_cpu_seconds")
