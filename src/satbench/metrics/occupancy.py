"""Occupancy three ways (docs/definitions.md#occupancy). Their gap is roughly the queue length
(Little)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from satbench.metrics.window import SteadyWindow
from satbench.records.events import RequestEvent
from satbench.records.samples import MetricsColumns, SampleColumns, SlotsColumns, as_columns

# a reading from before the window holds into it only if this many poll intervals old at most
CARRY_INTERVALS = 2
PRINTED_DIGITS = 6  # llama.cpp prints /metrics values with C++'s default 6 significant digits
DECODE_WEIGHTED_MAX_ERROR = 0.02  # drop the decode-weighted figure when rounding may bend it by more
MIN_OCCUPANCY_SAMPLES = 10  # sampled at ≥ 10 Hz; fewer readings in a window resolve it only coarsely
MAX_GAP_SHARE = 0.25  # nor may one reading stand for more than this share of the window


Points = tuple[np.ndarray, np.ndarray]
"""A step function's readings: stamps (ns, sorted; equal ones in file order) and values (NaN = a
failed poll or no value)."""


def _poll_interval_ns(times: np.ndarray) -> float | None:
    """The sampler's period, as the median gap between consecutive polls (failed ones included)."""
    gaps = np.diff(times)
    gaps = gaps[gaps > 0]
    return float(np.median(gaps)) if len(gaps) else None


def _reading(t: int, v: float) -> tuple[int, float | None]:
    return t, None if math.isnan(v) else v


def _steps(points: Points, interval: float | None, w: SteadyWindow) -> list[tuple[int, float | None]]:
    """The readings that describe the window: every poll inside it (None = failed poll), led by the
    last poll before it when that one succeeded and is at most CARRY_INTERVALS poll intervals old
    (`interval`: _poll_interval_ns of all the points). Empty when no poll inside the window
    succeeded: one stale reading is no mean over the window."""
    times, values = points
    lo = int(np.searchsorted(times, w.start_ns, side="left"))
    hi = int(np.searchsorted(times, w.end_ns, side="right"))
    inside = [_reading(t, v) for t, v in zip(times[lo:hi].tolist(), values[lo:hi].tolist(), strict=True)]
    if all(v is None for _, v in inside):
        return []
    before = [_reading(int(times[lo - 1]), float(values[lo - 1]))] if lo > 0 else []
    if (before and before[0][1] is not None and interval
            and w.start_ns - before[0][0] <= CARRY_INTERVALS * interval):
        return before + inside
    return inside


def _time_weighted_mean(points: Points, interval: float | None, w: SteadyWindow) -> float | None:
    """∫ value dt ÷ covered time, for a step function that holds each reading until the next poll.

    A failed poll (value None) leaves the time until the next good one uncovered; so does the time
    before the first reading (see `_steps` for when a reading from before the window counts).
    Returns None when no poll inside the window succeeded.
    """
    steps = _steps(points, interval, w)
    area, covered = 0.0, 0
    for i, (t, v) in enumerate(steps):
        t_next = steps[i + 1][0] if i + 1 < len(steps) else w.end_ns
        lo, hi = max(t, w.start_ns), min(t_next, w.end_ns)
        if v is not None and hi > lo:
            area += v * (hi - lo)
            covered += hi - lo
    return area / covered if covered > 0 else None


def _points(samples: SampleColumns | Sequence, kind: str, name: str) -> tuple[Points, float | None]:
    """The readings of column `name` (NaN where a poll recorded an error), and the poll interval."""
    c = as_columns(samples, kind)

    def make() -> tuple[Points, float | None]:
        values = c.column(name).astype(np.float64)
        return (c.t_ns, np.where(c.failed(truthy=True), math.nan, values)), _poll_interval_ns(c.t_ns)
    return c.memo(("points", name), make)


def _slots_points(samples: SlotsColumns) -> tuple[Points, float | None]:
    return _points(samples, "slots", "n_busy")


def _processing_points(samples: MetricsColumns) -> tuple[Points, float | None]:
    return _points(samples, "metrics", "requests_processing")


def time_weighted_busy_slots(samples: SlotsColumns, w: SteadyWindow) -> float | None:
    """Mean busy slots = ∫ |busy slots(t)| dt ÷ covered window time, from ≥10 Hz /slots samples."""
    return _time_weighted_mean(*_slots_points(samples), w)


def time_weighted_requests_processing(samples: MetricsColumns, w: SteadyWindow) -> float | None:
    """Mean of the `requests_processing` gauge over the window (fallback when /slots is absent)."""
    return _time_weighted_mean(*_processing_points(samples), w)


def _sampling(points: Points, w: SteadyWindow) -> tuple[int, int]:
    """(good readings inside the window, largest gap in ns between the window's edges and those
    readings): how finely a time-weighted figure resolved the window."""
    times, values = points
    lo = int(np.searchsorted(times, w.start_ns, side="left"))
    hi = int(np.searchsorted(times, w.end_ns, side="right"))
    good = times[lo:hi][~np.isnan(values[lo:hi])]
    edges = np.concatenate(([w.start_ns], good, [w.end_ns])).astype(np.int64)
    return len(good), int(np.max(np.diff(edges)))


def slots_sampling(samples: SlotsColumns, w: SteadyWindow) -> tuple[int, int]:
    """How finely /slots resolved the window: (good samples inside, largest gap ns)."""
    return _sampling(_slots_points(samples)[0], w)


def requests_processing_sampling(samples: MetricsColumns, w: SteadyWindow) -> tuple[int, int]:
    """How finely `requests_processing` resolved the window: (good samples inside, largest gap ns)."""
    return _sampling(_processing_points(samples)[0], w)


def coarse_sampling(rep: str, source: str, sampling: tuple[int, int], w: SteadyWindow) -> str | None:
    """'r1 3 /slots sample(s) in a 0.105 s window, largest gap 60 ms' when a time-weighted figure rests
    on fewer than MIN_OCCUPANCY_SAMPLES readings or one gap spans > MAX_GAP_SHARE of the window."""
    n, gap_ns = sampling
    if n >= MIN_OCCUPANCY_SAMPLES and gap_ns <= MAX_GAP_SHARE * (w.end_ns - w.start_ns):
        return None
    return f"{rep} {n} {source} sample(s) in a {w.duration_s:.3f} s window, largest gap {gap_ns / 1e6:.0f} ms"


def busy_slot_decodes(busy_per_decode: float, n_decode: float) -> float:
    """Cumulative busy-slot decodes B = n_busy_slots_per_decode (a running mean) × n_decode_total."""
    return busy_per_decode * n_decode


def printed_rounding(v: float) -> float:
    """δ = ½ unit of the last significant digit printed for `v`: PRINTED_DIGITS digits, or as many
    as the parsed value shows; 0 for an integer short enough to be printed exactly."""
    digits = max(PRINTED_DIGITS, len(repr(abs(v)).split("e")[0].replace(".", "").strip("0")))
    if v == 0 or (v == int(v) and abs(v) < 10 ** digits):
        return 0.0
    return 0.5 * 10 ** (math.floor(math.log10(abs(v))) - digits + 1)


def decode_weighted(samples: MetricsColumns, w: SteadyWindow) -> tuple[float | None, str | None]:
    """Mean busy slots per decode in the window D = ΔB ÷ Δn_decode_total, or (None, why not).

    Uses the first and last good /metrics samples inside the window (the first of equal stamps).
    Rounding bound: with δ the printed rounding of each value (`printed_rounding`), B = r·n
    carries ±(n·δr + r·δn), so |error of D| ≤ (Σ_i (n_i·δr_i + r_i·δn_i) + D·Σ_i δn_i) ÷ Δn;
    D is dropped when that bound exceeds DECODE_WEIGHTED_MAX_ERROR of it (long-lived servers:
    n_decode_total ≥ 10⁶ loses digits).
    """
    c = as_columns(samples, "metrics")
    rows = c.within(w.start_ns, w.end_ns)
    n_col, r_col = c.column("n_decode_total"), c.column("n_busy_slots_per_decode")
    good = ~c.failed()[rows] & ~np.isnan(n_col[rows]) & ~np.isnan(r_col[rows])
    idx = np.nonzero(good)[0] + rows.start
    if len(idx) < 2:
        return None, "fewer than two /metrics samples in the window"
    first = int(idx[0])
    last = int(idx[np.searchsorted(c.t_ns[idx], c.t_ns[idx[-1]], side="left")])
    (n0, r0), (n1, r1) = ((float(n_col[i]), float(r_col[i])) for i in (first, last))
    d_decode = n1 - n0
    if d_decode <= 0:
        return None, "no decode between the window's first and last /metrics samples"
    d = (busy_slot_decodes(r1, n1) - busy_slot_decodes(r0, n0)) / d_decode
    err = 0.0
    for n, r in ((n0, r0), (n1, r1)):
        err += n * printed_rounding(r) + (abs(r) + abs(d)) * printed_rounding(n)
    err /= d_decode
    if err > DECODE_WEIGHTED_MAX_ERROR * abs(d):
        return None, (f"/metrics prints {PRINTED_DIGITS} significant digits: at n_decode_total "
                      f"{n1:.3g} with {d_decode:.0f} decodes in the window the "
                      f"figure ({d:.2f}) may be off by ±{err:.2f} slots")
    return d, None


def decode_weighted_busy_slots(samples: MetricsColumns, w: SteadyWindow) -> float | None:
    """D of `decode_weighted` alone (None when it is unavailable)."""
    return decode_weighted(samples, w)[0]


def client_in_flight(events: Sequence[RequestEvent], w: SteadyWindow) -> float:
    """Mean requests in flight = Σ overlap([sent_ns, end_ns], window) ÷ window length (all phases)."""
    total = 0
    for ev in events:
        lo, hi = max(ev.sent_ns, w.start_ns), min(ev.end_ns, w.end_ns)
        if hi > lo:
            total += hi - lo
    return total / (w.end_ns - w.start_ns)
