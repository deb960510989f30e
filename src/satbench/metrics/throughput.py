"""Steady-window throughput (DESIGN.md §4): tokens and requests per second of one repetition.

Rates are taken over whole requests. In a closed loop a stream sends its next request the moment
the previous one ends, so from the send of a stream's first request that ends inside the steady
window to the end of its last, the stream did nothing but run those requests, each under the
level's full load (every stream is busy until the last request is issued, and the window ends at
the first end after that). Per stream s with requests r_1 … r_k ending inside the window:

    X_s = Σ_{i=1..k} amount(r_i) ÷ (end(r_k) − sent(r_1)),    X = N ÷ used · Σ_s X_s

over the `used` streams with k ≥ 1 (the others' rates are taken to be alike). Dividing all the
window's tokens by its length instead is biased when the streams move in step, as equal requests
on a batching server do: the window opens at a first token, so it holds every stream's decoding
but one prefill fewer than its requests took (+44 % at 2 requests per stream, +8 % at 8, on
recorded runs). Some tokens counted here arrived before the window opened: those of the first
request of a stream, which ran under full load all the same.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Callable

from satbench.events import CANCELLED, RequestEvent
from satbench.metrics.window import SteadyWindow


def output_tokens_in_window(events: list[RequestEvent], w: SteadyWindow) -> int:
    """Σ tokens of measured chunks with w.start ≤ t ≤ w.end (failed requests' delivered tokens count)."""
    return sum(
        n for ev in events if ev.phase == "measured" for t, n in ev.chunks if w.contains(t)
    )


def stream_requests(events: list[RequestEvent], w: SteadyWindow) -> dict[int, list[RequestEvent]]:
    """Per stream, its measured requests that ended inside the window, successful or failed (a
    failed one took its time too), not cancelled (satbench stopped it), in order of their ends."""
    by_stream: dict[int, list[RequestEvent]] = defaultdict(list)
    for ev in events:
        if ev.phase == "measured" and w.contains(ev.end_ns) and (ev.error is None or ev.error.type != CANCELLED):
            by_stream[ev.stream].append(ev)
    for evs in by_stream.values():
        evs.sort(key=lambda e: e.end_ns)
    return dict(by_stream)


def throughput_streams(events: list[RequestEvent], w: SteadyWindow) -> int:
    """How many streams have a request ending in the window: those the rates are taken from."""
    return sum(1 for evs in stream_requests(events, w).values() if evs[-1].end_ns > evs[0].sent_ns)


def whole_request_rate(events: list[RequestEvent], w: SteadyWindow, n_streams: int,
                       amount: Callable[[RequestEvent], float]) -> float | None:
    """X = N ÷ used · Σ_s Σ_i amount(r_i) ÷ (end(r_k) − sent(r_1)) (module docstring); None when
    no request ended in the window."""
    total, used = 0.0, 0
    for evs in stream_requests(events, w).values():
        span_ns = evs[-1].end_ns - evs[0].sent_ns
        if span_ns <= 0:
            continue
        total += sum(amount(e) for e in evs) / (span_ns / 1e9)
        used += 1
    return total * n_streams / used if used else None


def output_tokens_of(ev: RequestEvent) -> int:
    """Tokens the request delivered (a failed request's partial answer included)."""
    return sum(n for _, n in ev.chunks)


def prompt_tokens_of(ev: RequestEvent) -> int:
    """The request's prompt as the server counted it: llama.cpp's `timings.prompt_n + cache_n`,
    else the server's usage count, else the requested length."""
    if ev.timings is not None and ev.timings.prompt_n is not None:
        return ev.timings.prompt_n + (ev.timings.cache_n or 0)
    return ev.server_prompt_tokens if ev.server_prompt_tokens is not None else ev.prompt_tokens


def output_tok_per_s(events: list[RequestEvent], w: SteadyWindow, n_streams: int) -> float | None:
    """Output tok/s = N ÷ used · Σ_s (output tokens of the stream's requests ending in the window)
    ÷ (end of its last − send of its first)."""
    return whole_request_rate(events, w, n_streams, output_tokens_of)


def total_tok_per_s(events: list[RequestEvent], w: SteadyWindow, n_streams: int) -> float | None:
    """Total tok/s = as output tok/s, counting each request's prompt and output tokens."""
    return whole_request_rate(events, w, n_streams, lambda e: prompt_tokens_of(e) + output_tokens_of(e))


def req_per_s(events: list[RequestEvent], w: SteadyWindow, n_streams: int) -> float | None:
    """Req/s = as output tok/s, counting 1 per successful request (a failed one still took its time)."""
    return whole_request_rate(events, w, n_streams, lambda e: 1.0 if e.ok else 0.0)


def completed_in_window(events: list[RequestEvent], w: SteadyWindow) -> list[RequestEvent]:
    """Measured requests counted by completion time: successful ones with end_ns in the window."""
    return [ev for ev in events if ev.phase == "measured" and ev.ok and w.contains(ev.end_ns)]


def failed_in_window(events: list[RequestEvent], w: SteadyWindow) -> list[RequestEvent]:
    """Measured requests that failed, counted by the time they ended: end_ns in the window (not
    those cancelled when satbench stopped the level: that is not the server missing an SLO)."""
    return [ev for ev in events if ev.phase == "measured" and ev.error is not None and ev.error.type != CANCELLED
            and w.contains(ev.end_ns)]
