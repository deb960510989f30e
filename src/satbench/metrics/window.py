"""The steady window of one level repetition (docs/definitions.md#steady-window), from raw events alone."""

from __future__ import annotations

from satbench.metrics.latency import first_token_ns
from satbench.records.events import RequestEvent
from satbench.records.record import Record


class SteadyWindow(Record):
    start_ns: int
    end_ns: int

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9

    def contains(self, t_ns: int) -> bool:
        return self.start_ns <= t_ns <= self.end_ns


def window_start_ns(measured: list[RequestEvent], n_streams: int) -> int | None:
    """Start = first moment every one of the N streams has received a token of a measured request
    (docs/definitions.md#steady-window).

    = max over streams s of min over measured requests r of s of t_first_token(r).
    None when some stream never got a measured token.
    """
    firsts: dict[int, int] = {}
    for ev in measured:
        t = first_token_ns(ev)
        if t is None:
            continue
        if ev.stream not in firsts or t < firsts[ev.stream]:
            firsts[ev.stream] = t
    if len(firsts) < n_streams:
        return None
    return max(firsts.values())


def window_end_ns(all_events: list[RequestEvent]) -> int | None:
    """End = first moment fewer than N requests are in flight because none is issued any more.

    The last request is issued at T = max(targeted_ns) of measured requests; every measured
    request finishing after T is not replaced by a measured one, so
    End = min(end_ns of measured requests with end_ns > T). (When lanes run together, a
    background request replaces it; that is where the lane's measured work ends.)
    """
    measured = [ev for ev in all_events if ev.phase == "measured"]
    if not measured:
        return None
    last_issue = max(ev.targeted_ns for ev in measured)
    after = [ev.end_ns for ev in measured if ev.end_ns > last_issue]
    return min(after) if after else None


def steady_window(events: list[RequestEvent], n_streams: int) -> tuple[SteadyWindow | None, str | None]:
    """The window, or None with the reason it does not exist."""
    measured = [ev for ev in events if ev.phase == "measured"]
    start = window_start_ns(measured, n_streams)
    if start is None:
        return None, "not every stream received a token of a measured request"
    end = window_end_ns(events)
    if end is None or end <= start:
        return None, "the last request finished before every stream was busy (too few requests)"
    return SteadyWindow(start_ns=start, end_ns=end), None
