"""Per-request latency metrics (docs/definitions.md#measurement). Each function states its formula.

All take a successful `RequestEvent` and return milliseconds (None when undefined).
"""

from __future__ import annotations

# itl_ms is a latency figure too: re-exported from here
from satbench.records.events import NS_PER_MS, RequestEvent


def first_token_ns(ev: RequestEvent) -> int | None:
    """Arrival time of the first chunk that carries ≥ 1 generated token."""
    for t_ns, n in ev.chunks:
        if n > 0:
            return t_ns
    return None


def ttft_ms(ev: RequestEvent) -> float | None:
    """TTFT = t(first chunk with ≥1 generated token) − sent_ns (docs/definitions.md#ttft)."""
    first = first_token_ns(ev)
    return None if first is None else (first - ev.sent_ns) / NS_PER_MS


def e2e_ms(ev: RequestEvent) -> float:
    """E2E = end_ns − sent_ns."""
    return (ev.end_ns - ev.sent_ns) / NS_PER_MS


def tpot_ms(ev: RequestEvent) -> float | None:
    """TPOT = (E2E − TTFT) ÷ (output tokens − 1); undefined for fewer than 2 tokens
    (docs/definitions.md#itl-and-tpot)."""
    ttft = ttft_ms(ev)
    if ttft is None or ev.output_tokens < 2:
        return None
    return (e2e_ms(ev) - ttft) / (ev.output_tokens - 1)


def queue_time_ms(ev: RequestEvent, overhead_ms: float) -> float | None:
    """Queue-time estimate = max(0, TTFT − server prompt_ms − loopback overhead)
    (docs/definitions.md#queue-time).

    llama.cpp stamps no per-request queue time; this estimate folds in anything else that
    sits between sending and the first token besides prefill (clamped at zero).
    """
    ttft = ttft_ms(ev)
    if ttft is None or ev.timings is None or ev.timings.prompt_ms is None:
        return None
    return max(0.0, ttft - ev.timings.prompt_ms - overhead_ms)


def ttft_from_arrival_ms(ev: RequestEvent) -> float | None:
    """TTFT from arrival = t(first chunk with ≥1 generated token) − targeted_ns: the open loop's
    TTFT with the client-side wait for a free in-flight slot included (load/open_loop.py)."""
    first = first_token_ns(ev)
    return None if first is None else (first - ev.targeted_ns) / NS_PER_MS


def e2e_from_arrival_ms(ev: RequestEvent) -> float:
    """E2E from arrival = end_ns − targeted_ns."""
    return (ev.end_ns - ev.targeted_ns) / NS_PER_MS


def wait_ms(ev: RequestEvent) -> float:
    """Client-side wait = sent_ns − targeted_ns (≥ 0 when the request was sent on time or later)."""
    return (ev.sent_ns - ev.targeted_ns) / NS_PER_MS
