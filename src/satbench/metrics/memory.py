"""Server memory per level (DESIGN.md §4): peaks over the level's samples."""

from __future__ import annotations

from typing import Sequence

from satbench.events import ProcessSample


def peak_rss_bytes(samples: Sequence[ProcessSample], start_ns: int, end_ns: int) -> int | None:
    """Peak RSS = max rss_bytes of process samples with start ≤ t ≤ end (server and its children)."""
    vals = [s.rss_bytes for s in samples if start_ns <= s.t_ns <= end_ns and s.rss_bytes is not None]
    return max(vals) if vals else None


def peak_gpu_mem_bytes(samples: Sequence[ProcessSample], start_ns: int, end_ns: int) -> int | None:
    """Peak GPU memory used = max NVML memory.used over the level (None without a GPU)."""
    vals = [s.gpu_mem_used_bytes for s in samples
            if start_ns <= s.t_ns <= end_ns and s.gpu_mem_used_bytes is not None]
    return max(vals) if vals else None


def server_cpu_utilisation(samples: Sequence[ProcessSample], start_ns: int, end_ns: int) -> float | None:
    """Server CPU = Δcpu_seconds ÷ Δwall over the level, in cores (1.0 = one core busy)."""
    pts = [s for s in samples if start_ns <= s.t_ns <= end_ns and s.cpu_seconds is not None]
    if len(pts) < 2:
        return None
    first, last = pts[0], pts[-1]
    wall_s = (last.t_ns - first.t_ns) / 1e9
    if wall_s <= 0:
        return None
    return (last.cpu_seconds - first.cpu_seconds) / wall_s  # type: ignore[operator]
