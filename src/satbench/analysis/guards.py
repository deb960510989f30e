"""Whether a check's workload really created the situation its definition needs (docs/fairness.md),
and whether the client's clock can be trusted for it; a check whose evidence fails these is
`inconclusive` (docs/definitions.md#inconclusive), never a pass or fail by accident.

Each guard is a small function of raw events, so `analyze` recomputes it like any figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import TypeVar

from satbench.metrics.latency import first_token_ns, ttft_ms
from satbench.records.events import RequestEvent

RESOLUTION_MS = 1.0  # what a Python client on a busy host resolves (benchmarks/harness_overhead.py)
SOLO_SPREAD_MAX = 1.5  # lone references further apart than this (max ÷ min) say the host was unsteady
MIN_SHARED_TOKENS = 20  # F1: an interval side by side counts when one of the two got this many tokens
BACKLOG_SHARE_MIN = 0.8  # F3: more clients in flight than slots for at least this share of its window
# (a closed loop's clients re-send within ~1 ms, yet completions come in bursts: 87 % on an idle host
# with 15 ms requests; a client that lagged 100 ms on a 300 ms window still fails it)

T = TypeVar("T")


def known(value: T | None) -> T:
    """A timing a check's arithmetic needs (a TTFT, a first-token stamp). None, from a request that
    carried no token, is a TypeError, as that arithmetic on it is."""
    if value is None:
        raise TypeError("a request the check times carried no token")
    return value


def stamp_lag_ms(e: RequestEvent) -> float | None:
    """Server prompt time − client TTFT, ms. A client TTFT below the server's own prompt time
    (`timings.prompt_ms`, prefill only) is impossible: the client stamped its send late, e.g.
    descheduled just after writing the request on a loaded host. None without server timings."""
    ttft = ttft_ms(e)
    if e.timings is None or e.timings.prompt_ms is None or ttft is None:
        return None
    return e.timings.prompt_ms - ttft


def late_stamped(e: RequestEvent) -> bool:
    """True when the client's TTFT falls short of the server's prompt time by more than the
    client resolves (RESOLUTION_MS)."""
    lag = stamp_lag_ms(e)
    return lag is not None and lag > RESOLUTION_MS


def stamp_note(events: Sequence[RequestEvent], left: str = "left out") -> str:
    """Why late-stamped requests were left out, for a derivation or a reason ('' when none were)."""
    lags = [stamp_lag_ms(e) or 0.0 for e in events if late_stamped(e)]
    if not lags:
        return ""
    return (f"{len(lags)} request(s) {left}: the client's TTFT was up to {max(lags):.1f} ms below the "
            f"server's own prompt time (the client stamped its send late: a loaded host)")


def waited_ms(e: RequestEvent) -> float | None:
    """TTFT − the server's own prompt time (`timings.prompt_ms`): how long the request waited before
    the server began its prefill (plus the round trip). None without server timings."""
    lag = stamp_lag_ms(e)
    return None if lag is None else -lag


def off_closed_loop(events: Sequence[RequestEvent], streams: int, check: str) -> str | None:
    """Why these records cannot be a closed loop of `streams` streams, or None: a stream outside
    0..streams−1, or one stream with a request sent before its previous one ended. A closed loop
    sends a stream's next request only after reading the last one's final byte, so at most `streams`
    requests are ever in flight; the pairing that follows costs in proportion to that. Records that
    break it (written by hand, or copied) are refused in O(n log n) before any pairing."""
    spans: dict[int, list[tuple[int, int]]] = {}
    for e in events:
        if not 0 <= e.stream < streams:
            return (f"a record of stream {e.stream}, outside the plan's {streams} streams: these are not "
                    f"{check}'s closed loop")
        spans.setdefault(e.stream, []).append((e.sent_ns, e.end_ns))
    for stream, sent_end in sorted(spans.items()):
        sent_end.sort()
        for (_, end), (sent, _) in pairwise(sent_end):
            if sent < end:
                return (f"stream {stream} had two requests in flight at once (one sent "
                        f"{(end - sent) / 1e6:.1f} ms before the previous ended): these are not "
                        f"{check}'s closed loop")
    return None


def slow_compute_only(over: Sequence[RequestEvent], wait_allowed_ms: float, prefill_ms: float) -> str | None:
    """Why TTFTs over F1's bound say nothing of the scheduler, or None when they may: every such
    request waited no longer than the bound allows (`wait_allowed_ms`: its iterations and jitter)
    before the server began its prefill, which then took longer than the whole bound's prefill
    (`prefill_ms`, Σprompt at the calibrated rate): the server computed slower than calibrated (a
    host that stalled it), it did not make the request wait."""
    waits = [(w, e.timings.prompt_ms) for e in over
             if (w := waited_ms(e)) is not None and e.timings and e.timings.prompt_ms is not None]
    if not over or len(waits) < len(over) or any(w > wait_allowed_ms or p <= prefill_ms for w, p in waits):
        return None
    worst = max(p for _, p in waits)
    return (f"{len(over)} request(s) over the TTFT bound waited at most {max(w for w, _ in waits):.1f} ms "
            f"(the bound allows {wait_allowed_ms:.1f}) before the server began their prefill, which then "
            "took up to "
            f"{worst:.0f} ms by the server's own timings, against the {prefill_ms:.0f} ms the bound allows "
            "for prefill "
            "(Σprompt at the calibrated rate): the server computed slower than calibrated (a loaded host?), "
            "it did not "
            f"make them wait")


def solo_spread(values_ms: Sequence[float | None]) -> str | None:
    """Why lone reference timings cannot serve as a reference (max ÷ min > SOLO_SPREAD_MAX), or None.
    Fewer than two say nothing; of two or more, every one must be known (see `known`)."""
    if len(values_ms) < 2:
        return None
    timed = [known(v) for v in values_ms]
    if min(timed) <= 0:
        return None
    lo, hi = min(timed), max(timed)
    if hi / lo <= SOLO_SPREAD_MAX:
        return None
    return (f"the same request alone took {lo:.1f}–{hi:.1f} ms in {len(values_ms)} tries (more than "
            f"{SOLO_SPREAD_MAX:g}× apart): the host was too unsteady for a reference")


def all_in_flight(events: Sequence[RequestEvent]) -> bool:
    """Whether every request was in flight at one moment: the last send precedes the first end."""
    return bool(events) and max(e.sent_ns for e in events) < min(e.end_ns for e in events)


def prefilling_when_sent(first: RequestEvent, second: RequestEvent) -> bool:
    """Whether `second` was sent while `first` was still prefilling (before its first token)."""
    t = first_token_ns(first)
    return t is not None and second.sent_ns < t


def tokens_between(e: RequestEvent, start_ns: int, end_ns: int) -> int:
    """Tokens of `e` whose chunk arrived in (start_ns, end_ns]."""
    return sum(n for t, n in e.chunks if start_ns < t <= end_ns)


def backlog_window(events: Sequence[RequestEvent]) -> tuple[int, int] | None:
    """F3's window: from the moment every client has a request outstanding (the last warmup send)
    to the first completion after the last measured request was issued. Unlike the steady window
    it does not wait for every client to be served, so a starved client counts with zero service."""
    warm = [e.sent_ns for e in events if e.phase == "warmup"]
    measured = [e for e in events if e.phase == "measured"]
    if not warm or not measured:
        return None
    last_issue = max(e.targeted_ns for e in measured)
    after = [e.end_ns for e in measured if e.end_ns > last_issue]
    start, end = max(warm), (min(after) if after else None)
    return (start, end) if end is not None and end > start else None


def backlogged_share(events: Sequence[RequestEvent], window: tuple[int, int], slots: int) -> float:
    """Share of the window during which more requests were in flight (sent, not ended) than the
    server has slots: F3's premise that the clients stay backlogged."""
    start, end = window
    if end <= start:
        return 0.0
    touching = [e for e in events if e.sent_ns < end and e.end_ns > start]
    steps = sorted([(max(e.sent_ns, start), 1) for e in touching]
                   + [(min(e.end_ns, end), -1) for e in touching])
    busy, level, t_prev = 0, 0, start
    for t, d in steps:
        if level > slots:
            busy += t - t_prev
        level, t_prev = level + d, t
    if level > slots:
        busy += end - t_prev
    return busy / (end - start)
