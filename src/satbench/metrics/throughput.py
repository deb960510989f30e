"""Steady-window throughput (DESIGN.md §4): tokens and requests per second of one repetition."""

from __future__ import annotations

from satbench.events import CANCELLED, RequestEvent
from satbench.metrics.latency import first_token_ns
from satbench.metrics.window import SteadyWindow


def output_tokens_in_window(events: list[RequestEvent], w: SteadyWindow) -> int:
    """Σ tokens of measured chunks with w.start ≤ t ≤ w.end (failed requests' delivered tokens count)."""
    return sum(
        n for ev in events if ev.phase == "measured" for t, n in ev.chunks if w.contains(t)
    )


def output_tok_per_s(events: list[RequestEvent], w: SteadyWindow) -> float:
    """Output tok/s = output tokens in window ÷ window length."""
    return output_tokens_in_window(events, w) / w.duration_s


def prompt_tokens_in_window(events: list[RequestEvent], w: SteadyWindow) -> int:
    """Σ prompt tokens of measured requests whose first token (end of prefill) is in the window.

    Uses the server's `timings.prompt_n + cache_n` when reported, else the requested length.
    """
    total = 0
    for ev in events:
        if ev.phase != "measured":
            continue
        first = first_token_ns(ev)
        if first is None or not w.contains(first):
            continue
        if ev.timings is not None and ev.timings.prompt_n is not None:
            total += ev.timings.prompt_n + (ev.timings.cache_n or 0)
        else:
            total += ev.prompt_tokens
    return total


def total_tok_per_s(events: list[RequestEvent], w: SteadyWindow) -> float:
    """Total tok/s = (prompt tokens prefilled in window + output tokens in window) ÷ window length."""
    return (prompt_tokens_in_window(events, w) + output_tokens_in_window(events, w)) / w.duration_s


def completed_in_window(events: list[RequestEvent], w: SteadyWindow) -> list[RequestEvent]:
    """Measured requests counted by completion time: successful ones with end_ns in the window."""
    return [ev for ev in events if ev.phase == "measured" and ev.ok and w.contains(ev.end_ns)]


def failed_in_window(events: list[RequestEvent], w: SteadyWindow) -> list[RequestEvent]:
    """Measured requests that failed, counted by the time they ended: end_ns in the window (not
    those cancelled when satbench stopped the level: that is not the server missing an SLO)."""
    return [ev for ev in events if ev.phase == "measured" and ev.error is not None and ev.error.type != CANCELLED
            and w.contains(ev.end_ns)]


def req_per_s(events: list[RequestEvent], w: SteadyWindow) -> float:
    """Req/s = successful measured requests completing in the window ÷ window length."""
    return len(completed_in_window(events, w)) / w.duration_s
