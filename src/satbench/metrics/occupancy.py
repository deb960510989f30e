"""Occupancy three ways (DESIGN.md §4). Their gap is roughly the queue length (Little)."""

from __future__ import annotations

from typing import Sequence

from satbench.events import MetricsSample, RequestEvent, SlotsSample
from satbench.metrics.window import SteadyWindow


def _time_weighted_mean(points: Sequence[tuple[int, float]], w: SteadyWindow) -> float | None:
    """∫ value dt ÷ window length for a step function that holds each value until the next point.

    The value before the first point inside the window is the last point before the window.
    Returns None when no point is at or before the window's end.
    """
    pts = sorted(points)
    if not pts or pts[0][0] > w.end_ns:
        return None
    area = 0.0
    for i, (t, v) in enumerate(pts):
        t_next = pts[i + 1][0] if i + 1 < len(pts) else w.end_ns
        lo, hi = max(t, w.start_ns), min(t_next, w.end_ns)
        if hi > lo:
            area += v * (hi - lo)
    covered_from = max(pts[0][0], w.start_ns)
    span = w.end_ns - covered_from
    return area / span if span > 0 else None


def time_weighted_busy_slots(samples: Sequence[SlotsSample], w: SteadyWindow) -> float | None:
    """Mean busy slots = ∫ |busy slots(t)| dt ÷ window, from ≥10 Hz /slots samples."""
    pts = [(s.t_ns, float(len(s.busy_ids))) for s in samples if s.error is None]
    return _time_weighted_mean(pts, w)


def time_weighted_requests_processing(samples: Sequence[MetricsSample], w: SteadyWindow) -> float | None:
    """Mean of the `requests_processing` gauge over the window (fallback when /slots is absent)."""
    pts = [(s.t_ns, s.values["requests_processing"]) for s in samples
           if s.error is None and "requests_processing" in s.values]
    return _time_weighted_mean(pts, w)


def busy_slot_decodes(sample: MetricsSample) -> float | None:
    """Cumulative busy-slot decodes B = n_busy_slots_per_decode (a running mean) × n_decode_total."""
    v = sample.values
    if "n_busy_slots_per_decode" not in v or "n_decode_total" not in v:
        return None
    return v["n_busy_slots_per_decode"] * v["n_decode_total"]


def decode_weighted_busy_slots(samples: Sequence[MetricsSample], w: SteadyWindow) -> float | None:
    """Mean busy slots per decode in the window = ΔB ÷ Δn_decode_total.

    Uses the first and last good /metrics samples inside the window; None if fewer than two
    or no decode happened between them.
    """
    inside = [s for s in samples if s.error is None and w.contains(s.t_ns)
              and busy_slot_decodes(s) is not None]
    if len(inside) < 2:
        return None
    first, last = min(inside, key=lambda s: s.t_ns), max(inside, key=lambda s: s.t_ns)
    d_decode = last.values["n_decode_total"] - first.values["n_decode_total"]
    if d_decode <= 0:
        return None
    return (busy_slot_decodes(last) - busy_slot_decodes(first)) / d_decode  # type: ignore[operator]


def client_in_flight(events: Sequence[RequestEvent], w: SteadyWindow) -> float:
    """Mean requests in flight = Σ overlap([sent_ns, end_ns], window) ÷ window length (all phases)."""
    total = 0
    for ev in events:
        lo, hi = max(ev.sent_ns, w.start_ns), min(ev.end_ns, w.end_ns)
        if hi > lo:
            total += hi - lo
    return total / (w.end_ns - w.start_ns)
