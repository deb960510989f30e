"""Server memory and CPU per level (DESIGN.md §4), from process samples.

A level's samples are those inside [start, end] plus the nearest one on either side (the
sweep takes one at every level boundary), so a level shorter than the sampling period still
has its figures. Only samples of the processes that ran the level count: a resumed session's
satbench, or a server restarted after a failure, is another process whose cumulative counters
start afresh (each sample names its server_pid and client_pid). A figure that would mix them, or
a counter that went backwards, is null with a reason (`cpu_why`), never a negative number.
"""

from __future__ import annotations

from collections.abc import Sequence

from satbench.records.events import ProcessSample

# whose process a figure reads: the server's (as read by one satbench session) or satbench's own session
OWNER = {"rss_bytes": ("server_pid", "client_pid"), "cpu_seconds": ("server_pid", "client_pid"),
         "client_cpu_seconds": ("client_pid",), "host_busy_cpu_seconds": ("client_pid",),
         "gpu_mem_used_bytes": ("client_pid",)}
WHO = {"cpu_seconds": "server", "client_cpu_seconds": "satbench", "host_busy_cpu_seconds": "host busy-CPU"}


def _key(s: ProcessSample, field: str) -> tuple:
    return tuple(getattr(s, k) for k in OWNER.get(field, ()))


def _readings(samples: Sequence[ProcessSample], field: str) -> list[ProcessSample]:
    return sorted((s for s in samples if s.error is None and getattr(s, field) is not None),
                  key=lambda s: s.t_ns)


def level_sources(samples: Sequence[ProcessSample], start_ns: int, end_ns: int, field: str) -> set[tuple]:
    """The processes that ran the level, for `field`: (server_pid, client_pid) or (client_pid,) of its
    readings inside [start, end], else of the last one before start (the level's start snapshot)."""
    good = _readings(samples, field)
    inside = {_key(s, field) for s in good if start_ns <= s.t_ns <= end_ns}
    return inside or {_key(s, field) for s in [s for s in good if s.t_ns < start_ns][-1:]}


def level_samples(samples: Sequence[ProcessSample], start_ns: int, end_ns: int,
                  field: str = "rss_bytes") -> list[ProcessSample]:
    """Readings of `field` with start ≤ t ≤ end, plus the last one before start and the first after
    end, all from the one process that ran the level (level_sources); none when it was several."""
    sources = level_sources(samples, start_ns, end_ns, field)
    if len(sources) != 1:
        return []
    good = [s for s in _readings(samples, field) if _key(s, field) in sources]
    before = [s for s in good if s.t_ns < start_ns][-1:]
    inside = [s for s in good if start_ns <= s.t_ns <= end_ns]
    after = [s for s in good if s.t_ns > end_ns][:1]
    return before + inside + after


def peak_rss_bytes(samples: Sequence[ProcessSample], start_ns: int, end_ns: int) -> int | None:
    """Peak RSS = max rss_bytes over the level's samples (server process and its children)."""
    vals = [s.rss_bytes for s in level_samples(samples, start_ns, end_ns, "rss_bytes")
            if s.rss_bytes is not None]
    return max(vals) if vals else None


def peak_gpu_mem_bytes(samples: Sequence[ProcessSample], start_ns: int, end_ns: int) -> int | None:
    """Peak GPU memory used = max NVML memory.used over the level's samples (None without a GPU)."""
    vals = [s.gpu_mem_used_bytes for s in level_samples(samples, start_ns, end_ns, "gpu_mem_used_bytes")
            if s.gpu_mem_used_bytes is not None]
    return max(vals) if vals else None


def _cores(samples: Sequence[ProcessSample], start_ns: int, end_ns: int,
           field: str) -> tuple[float | None, str | None]:
    """(cores, None), or (None, why)."""
    who = WHO.get(field, field)
    sources = level_sources(samples, start_ns, end_ns, field)
    if len(sources) > 1:
        pids = ", ".join("/".join(str(p) for p in src) for src in sorted(sources, key=str))
        return None, f"readings of {len(sources)} different processes in the level ({pids}): not one counter"
    pts = level_samples(samples, start_ns, end_ns, field)
    if len(pts) < 2:
        if field == "cpu_seconds" and not _readings(samples, field) and any(s.error is None for s in samples):
            return None, "the server was not started by satbench (url lane): its process cannot be read"
        return None, f"fewer than two {who} CPU readings from the process that ran the level"
    first, last = pts[0], pts[-1]
    wall_s = (last.t_ns - first.t_ns) / 1e9
    delta = getattr(last, field) - getattr(first, field)
    if wall_s <= 0:
        return None, f"{who} CPU readings without elapsed time between them"
    if delta < 0:
        return None, (f"the {who} CPU counter went backwards ({delta:+.2f} s): "
                      "the readings are not of one process")
    return delta / wall_s, None


def cpu_cores(samples: Sequence[ProcessSample], start_ns: int, end_ns: int,
              field: str = "cpu_seconds") -> float | None:
    """Cores used = Δ(cumulative CPU seconds in `field`) ÷ Δwall between the level's first and last
    samples of one process; None (see cpu_why) when there is no such pair or Δ < 0."""
    return _cores(samples, start_ns, end_ns, field)[0]


def cpu_why(samples: Sequence[ProcessSample], start_ns: int, end_ns: int,
            field: str = "cpu_seconds") -> str | None:
    """Why cpu_cores(…) is None for this level; None when it has a value."""
    return _cores(samples, start_ns, end_ns, field)[1]


def server_cpu_utilisation(samples: Sequence[ProcessSample], start_ns: int, end_ns: int) -> float | None:
    """Server CPU = Δcpu_seconds ÷ Δwall of the server process tree, in cores."""
    return cpu_cores(samples, start_ns, end_ns, "cpu_seconds")


def host_busy_cores(samples: Sequence[ProcessSample], start_ns: int, end_ns: int) -> float | None:
    """Whole machine busy = Δ(total − idle − iowait CPU seconds) ÷ Δwall, in cores."""
    return cpu_cores(samples, start_ns, end_ns, "host_busy_cpu_seconds")


def client_cpu_cores(samples: Sequence[ProcessSample], start_ns: int, end_ns: int) -> float | None:
    """satbench's own process (load generator and sampler) = Δ its CPU seconds ÷ Δwall, in cores."""
    return cpu_cores(samples, start_ns, end_ns, "client_cpu_seconds")
