"""Server memory and CPU per level (docs/metrics.md), from process samples.

A level's samples are those inside [start, end] plus the nearest one on either side (the
sweep takes one at every level boundary), so a level shorter than the sampling period still
has its figures. Only samples of the processes that ran the level count: a resumed session's
satbench, or a server restarted after a failure, is another process whose cumulative counters
start afresh (each sample names its server_pid and client_pid). A figure that would mix them, or
a counter that went backwards, is null with a reason (`cpu_why`), never a negative number.
"""

from __future__ import annotations

import numpy as np

from satbench.records.samples import ProcessColumns, SampleColumns, as_columns

# whose process a figure reads: the server's (as read by one satbench session) or satbench's own session
OWNER = {"rss_bytes": ("server_pid", "client_pid"), "cpu_seconds": ("server_pid", "client_pid"),
         "client_cpu_seconds": ("client_pid",), "host_busy_cpu_seconds": ("client_pid",),
         "gpu_mem_used_bytes": ("client_pid",)}
WHO = {"cpu_seconds": "server", "client_cpu_seconds": "satbench", "host_busy_cpu_seconds": "host busy-CPU"}


Key = tuple[int | None, ...]  # the owner pids of a reading (OWNER), None where not recorded


def _readings(samples: ProcessColumns, field: str) -> tuple[SampleColumns, np.ndarray]:
    """The table, and the rows (in time order) of its good readings of `field`."""
    c = as_columns(samples, "process")
    col = c.column(field)
    present = ~np.isnan(col) if col.dtype.kind == "f" else col >= 0
    return c, c.memo(("readings", field), lambda: np.nonzero(~c.failed() & present)[0])


def _keys(c: SampleColumns, rows: np.ndarray, field: str) -> set[Key]:
    """The distinct owners (OWNER[field]) of `rows`."""
    owners = OWNER.get(field, ())
    if not owners:
        return {()} if len(rows) else set()
    cols = np.stack([c.column(k)[rows] for k in owners], axis=1)
    return {tuple(None if v < 0 else v for v in row) for row in np.unique(cols, axis=0).tolist()}


def _of_key(c: SampleColumns, rows: np.ndarray, field: str, key: Key) -> np.ndarray:
    """The rows of `rows` read from the process `key`."""
    def make() -> np.ndarray:
        keep = np.ones(len(rows), dtype=bool)
        for k, v in zip(OWNER.get(field, ()), key, strict=True):
            keep &= c.column(k)[rows] == (-1 if v is None else v)
        return rows[keep]
    return c.memo(("of_key", field, key), make)


def _span(c: SampleColumns, rows: np.ndarray, start_ns: int, end_ns: int) -> tuple[int, int]:
    """(positions in `rows` of the first reading at or after start, of the first after end)."""
    t = c.t_ns[rows]
    return int(np.searchsorted(t, start_ns, side="left")), int(np.searchsorted(t, end_ns, side="right"))


def level_sources(samples: ProcessColumns, start_ns: int, end_ns: int, field: str) -> set[Key]:
    """The processes that ran the level, for `field`: (server_pid, client_pid) or (client_pid,) of its
    readings inside [start, end], else of the last one before start (the level's start snapshot)."""
    c, good = _readings(samples, field)
    lo, hi = _span(c, good, start_ns, end_ns)
    return _keys(c, good[lo:hi], field) or _keys(c, good[max(lo - 1, 0):lo], field)


def _level_rows(samples: ProcessColumns, start_ns: int, end_ns: int,
                field: str) -> tuple[SampleColumns, np.ndarray]:
    """The table, and the rows of `level_samples`."""
    c, good = _readings(samples, field)
    sources = level_sources(c, start_ns, end_ns, field)
    if len(sources) != 1:
        return c, good[:0]
    mine = _of_key(c, good, field, next(iter(sources)))
    lo, hi = _span(c, mine, start_ns, end_ns)
    return c, mine[max(lo - 1, 0):hi + 1]


def level_samples(samples: ProcessColumns, start_ns: int, end_ns: int,
                  field: str = "rss_bytes") -> list[int | float]:
    """Readings of `field` with start ≤ t ≤ end, plus the last one before start and the first after
    end, all from the one process that ran the level (level_sources); none when it was several."""
    c, rows = _level_rows(samples, start_ns, end_ns, field)
    return c.column(field)[rows].tolist()


def peak_rss_bytes(samples: ProcessColumns, start_ns: int, end_ns: int) -> int | None:
    """Peak RSS = max rss_bytes over the level's samples (server process and its children)."""
    vals = level_samples(samples, start_ns, end_ns, "rss_bytes")
    return int(max(vals)) if vals else None


def peak_gpu_mem_bytes(samples: ProcessColumns, start_ns: int, end_ns: int) -> int | None:
    """Peak GPU memory used = max NVML memory.used over the level's samples (None without a GPU)."""
    vals = level_samples(samples, start_ns, end_ns, "gpu_mem_used_bytes")
    return int(max(vals)) if vals else None


def _cores(samples: ProcessColumns, start_ns: int, end_ns: int,
           field: str) -> tuple[float | None, str | None]:
    """(cores, None), or (None, why)."""
    who = WHO.get(field, field)
    c = as_columns(samples, "process")
    sources = level_sources(c, start_ns, end_ns, field)
    if len(sources) > 1:
        pids = ", ".join("/".join(str(p) for p in src) for src in sorted(sources, key=str))
        return None, f"readings of {len(sources)} different processes in the level ({pids}): not one counter"
    _, rows = _level_rows(c, start_ns, end_ns, field)
    if len(rows) < 2:
        if field == "cpu_seconds" and not len(_readings(c, field)[1]) and not c.failed().all():
            return None, "the server was not started by satbench (url lane): its process cannot be read"
        return None, f"fewer than two {who} CPU readings from the process that ran the level"
    first, last = int(rows[0]), int(rows[-1])
    wall_s = (int(c.t_ns[last]) - int(c.t_ns[first])) / 1e9
    delta = float(c.column(field)[last]) - float(c.column(field)[first])
    if wall_s <= 0:
        return None, f"{who} CPU readings without elapsed time between them"
    if delta < 0:
        return None, (f"the {who} CPU counter went backwards ({delta:+.2f} s): "
                      "the readings are not of one process")
    return delta / wall_s, None


def cpu_cores(samples: ProcessColumns, start_ns: int, end_ns: int,
              field: str = "cpu_seconds") -> float | None:
    """Cores used = Δ(cumulative CPU seconds in `field`) ÷ Δwall between the level's first and last
    samples of one process; None (see cpu_why) when there is no such pair or Δ < 0."""
    return _cores(samples, start_ns, end_ns, field)[0]


def cpu_why(samples: ProcessColumns, start_ns: int, end_ns: int,
            field: str = "cpu_seconds") -> str | None:
    """Why cpu_cores(…) is None for this level; None when it has a value."""
    return _cores(samples, start_ns, end_ns, field)[1]


def server_cpu_utilisation(samples: ProcessColumns, start_ns: int, end_ns: int) -> float | None:
    """Server CPU = Δcpu_seconds ÷ Δwall of the server process tree, in cores."""
    return cpu_cores(samples, start_ns, end_ns, "cpu_seconds")


def host_busy_cores(samples: ProcessColumns, start_ns: int, end_ns: int) -> float | None:
    """Whole machine busy = Δ(total − idle − iowait CPU seconds) ÷ Δwall, in cores."""
    return cpu_cores(samples, start_ns, end_ns, "host_busy_cpu_seconds")


def client_cpu_cores(samples: ProcessColumns, start_ns: int, end_ns: int) -> float | None:
    """satbench's own process (load generator and sampler) = Δ its CPU seconds ÷ Δwall, in cores."""
    return cpu_cores(samples, start_ns, end_ns, "client_cpu_seconds")
