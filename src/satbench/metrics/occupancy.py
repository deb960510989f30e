"""Occupancy three ways (DESIGN.md §4). Their gap is roughly the queue length (Little)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import pairwise
from statistics import median

from satbench.metrics.window import SteadyWindow
from satbench.records.events import MetricsSample, RequestEvent, SlotsSample

# a reading from before the window holds into it only if this many poll intervals old at most
CARRY_INTERVALS = 2
PRINTED_DIGITS = 6  # llama.cpp prints /metrics values with C++'s default 6 significant digits
DECODE_WEIGHTED_MAX_ERROR = 0.02  # drop the decode-weighted figure when rounding may bend it by more
MIN_OCCUPANCY_SAMPLES = 10  # DESIGN.md §4: ≥ 10 Hz; fewer readings in a window resolve it only coarsely
MAX_GAP_SHARE = 0.25  # nor may one reading stand for more than this share of the window


def _poll_interval_ns(points: Sequence[tuple[int, float | None]]) -> float | None:
    """The sampler's period, as the median gap between consecutive polls (failed ones included)."""
    times = sorted(t for t, _ in points)
    gaps = [b - a for a, b in pairwise(times) if b > a]
    return median(gaps) if gaps else None


def _steps(points: Sequence[tuple[int, float | None]], w: SteadyWindow) -> list[tuple[int, float | None]]:
    """The readings that describe the window: every poll inside it (None = failed poll), led by the
    last poll before it when that one succeeded and is at most CARRY_INTERVALS poll intervals old.
    Empty when no poll inside the window succeeded: one stale reading is no mean over the window."""
    pts = sorted(points, key=lambda p: p[0])
    inside = [p for p in pts if w.contains(p[0])]
    if all(v is None for _, v in inside):
        return []
    before = [p for p in pts if p[0] < w.start_ns][-1:]
    interval = _poll_interval_ns(pts)
    if (before and before[0][1] is not None and interval
            and w.start_ns - before[0][0] <= CARRY_INTERVALS * interval):
        return before + inside
    return inside


def _time_weighted_mean(points: Sequence[tuple[int, float | None]], w: SteadyWindow) -> float | None:
    """∫ value dt ÷ covered time, for a step function that holds each reading until the next poll.

    A failed poll (value None) leaves the time until the next good one uncovered; so does the time
    before the first reading (see `_steps` for when a reading from before the window counts).
    Returns None when no poll inside the window succeeded.
    """
    steps = _steps(points, w)
    area, covered = 0.0, 0
    for i, (t, v) in enumerate(steps):
        t_next = steps[i + 1][0] if i + 1 < len(steps) else w.end_ns
        lo, hi = max(t, w.start_ns), min(t_next, w.end_ns)
        if v is not None and hi > lo:
            area += v * (hi - lo)
            covered += hi - lo
    return area / covered if covered > 0 else None


def _slots_points(samples: Sequence[SlotsSample]) -> list[tuple[int, float | None]]:
    return [(s.t_ns, None if s.error else float(len(s.busy_ids))) for s in samples]


def _processing_points(samples: Sequence[MetricsSample]) -> list[tuple[int, float | None]]:
    return [(s.t_ns, None if s.error else s.values.get("requests_processing")) for s in samples]


def time_weighted_busy_slots(samples: Sequence[SlotsSample], w: SteadyWindow) -> float | None:
    """Mean busy slots = ∫ |busy slots(t)| dt ÷ covered window time, from ≥10 Hz /slots samples."""
    return _time_weighted_mean(_slots_points(samples), w)


def time_weighted_requests_processing(samples: Sequence[MetricsSample], w: SteadyWindow) -> float | None:
    """Mean of the `requests_processing` gauge over the window (fallback when /slots is absent)."""
    return _time_weighted_mean(_processing_points(samples), w)


def _sampling(points: Sequence[tuple[int, float | None]], w: SteadyWindow) -> tuple[int, int]:
    """(good readings inside the window, largest gap in ns between the window's edges and those
    readings): how finely a time-weighted figure resolved the window."""
    times = sorted(t for t, v in points if v is not None and w.contains(t))
    edges = [w.start_ns] + times + [w.end_ns]
    return len(times), max(b - a for a, b in pairwise(edges))


def slots_sampling(samples: Sequence[SlotsSample], w: SteadyWindow) -> tuple[int, int]:
    """How finely /slots resolved the window: (good samples inside, largest gap ns)."""
    return _sampling(_slots_points(samples), w)


def requests_processing_sampling(samples: Sequence[MetricsSample], w: SteadyWindow) -> tuple[int, int]:
    """How finely `requests_processing` resolved the window: (good samples inside, largest gap ns)."""
    return _sampling(_processing_points(samples), w)


def coarse_sampling(rep: str, source: str, sampling: tuple[int, int], w: SteadyWindow) -> str | None:
    """'r1 3 /slots sample(s) in a 0.105 s window, largest gap 60 ms' when a time-weighted figure rests
    on fewer than MIN_OCCUPANCY_SAMPLES readings or one gap spans > MAX_GAP_SHARE of the window."""
    n, gap_ns = sampling
    if n >= MIN_OCCUPANCY_SAMPLES and gap_ns <= MAX_GAP_SHARE * (w.end_ns - w.start_ns):
        return None
    return f"{rep} {n} {source} sample(s) in a {w.duration_s:.3f} s window, largest gap {gap_ns / 1e6:.0f} ms"


def busy_slot_decodes(sample: MetricsSample) -> float | None:
    """Cumulative busy-slot decodes B = n_busy_slots_per_decode (a running mean) × n_decode_total."""
    v = sample.values
    if "n_busy_slots_per_decode" not in v or "n_decode_total" not in v:
        return None
    return v["n_busy_slots_per_decode"] * v["n_decode_total"]


def printed_rounding(v: float) -> float:
    """δ = ½ unit of the last significant digit printed for `v`: PRINTED_DIGITS digits, or as many
    as the parsed value shows; 0 for an integer short enough to be printed exactly."""
    digits = max(PRINTED_DIGITS, len(repr(abs(v)).split("e")[0].replace(".", "").strip("0")))
    if v == 0 or (v == int(v) and abs(v) < 10 ** digits):
        return 0.0
    return 0.5 * 10 ** (math.floor(math.log10(abs(v))) - digits + 1)


def decode_weighted(samples: Sequence[MetricsSample], w: SteadyWindow) -> tuple[float | None, str | None]:
    """Mean busy slots per decode in the window D = ΔB ÷ Δn_decode_total, or (None, why not).

    Uses the first and last good /metrics samples inside the window. Rounding bound: with δ the
    printed rounding of each value (`printed_rounding`), B = r·n carries ±(n·δr + r·δn), so
    |error of D| ≤ (Σ_i (n_i·δr_i + r_i·δn_i) + D·Σ_i δn_i) ÷ Δn; D is dropped when that bound
    exceeds DECODE_WEIGHTED_MAX_ERROR of it (long-lived servers: n_decode_total ≥ 10⁶ loses digits).
    """
    inside = [s for s in samples if s.error is None and w.contains(s.t_ns)
              and busy_slot_decodes(s) is not None]
    if len(inside) < 2:
        return None, "fewer than two /metrics samples in the window"
    first, last = min(inside, key=lambda s: s.t_ns), max(inside, key=lambda s: s.t_ns)
    d_decode = last.values["n_decode_total"] - first.values["n_decode_total"]
    if d_decode <= 0:
        return None, "no decode between the window's first and last /metrics samples"
    d = (busy_slot_decodes(last) - busy_slot_decodes(first)) / d_decode  # type: ignore[operator]
    err = 0.0
    for s in (first, last):
        n, r = s.values["n_decode_total"], s.values["n_busy_slots_per_decode"]
        err += n * printed_rounding(r) + (abs(r) + abs(d)) * printed_rounding(n)
    err /= d_decode
    if err > DECODE_WEIGHTED_MAX_ERROR * abs(d):
        return None, (f"/metrics prints {PRINTED_DIGITS} significant digits: at n_decode_total "
                      f"{last.values['n_decode_total']:.3g} with {d_decode:.0f} decodes in the window the "
                      f"figure ({d:.2f}) may be off by ±{err:.2f} slots")
    return d, None


def decode_weighted_busy_slots(samples: Sequence[MetricsSample], w: SteadyWindow) -> float | None:
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
