"""Whether a check's workload really created the situation its definition needs (DESIGN.md §6),
and whether the client's clock can be trusted for it; a check whose evidence fails these is
`inconclusive`, never a pass or fail by accident.

Each guard is a small function of raw events, so `analyze` recomputes it like any figure.
"""

from __future__ import annotations

import statistics
from typing import Sequence

from satbench.events import RequestEvent
from satbench.metrics.latency import first_token_ns, ttft_ms

STAMP_SLACK_MS = 1.0  # what a Python client on a busy host resolves (RESOLUTION_MS in verdicts)
SOLO_SPREAD_MAX = 1.5  # lone references further apart than this (max ÷ min) say the host was unsteady
BACKLOG_SHARE_MIN = 0.8  # F3: more clients in flight than slots for at least this share of its window
# (a closed loop's clients re-send within ~1 ms, yet completions come in bursts: 87 % on an idle host
# with 15 ms requests; a client that lagged 100 ms on a 300 ms window still fails it)


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
    client resolves (STAMP_SLACK_MS)."""
    lag = stamp_lag_ms(e)
    return lag is not None and lag > STAMP_SLACK_MS


def stamp_note(events: Sequence[RequestEvent], left: str = "left out") -> str:
    """Why late-stamped requests were left out, for a derivation or a reason ('' when none were)."""
    lags = [lag for e in events if (lag := stamp_lag_ms(e)) is not None and lag > STAMP_SLACK_MS]
    if not lags:
        return ""
    return (f"{len(lags)} request(s) {left}: the client's TTFT was up to {max(lags):.1f} ms below the server's "
            f"own prompt time (the client stamped its send late: a loaded host)")


def solo_spread(values_ms: Sequence[float]) -> str | None:
    """Why lone reference timings cannot serve as a reference (max ÷ min > SOLO_SPREAD_MAX), or None."""
    if len(values_ms) < 2 or min(values_ms) <= 0:
        return None
    lo, hi = min(values_ms), max(values_ms)
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


def _overlap_ns(a: tuple[int, int], b: tuple[int, int]) -> int:
    return max(0, min(a[1], b[1]) - max(a[0], b[0]))


def relative_decode_rates(judged: Sequence[RequestEvent], pool: Sequence[RequestEvent],
                          rate_of) -> list[float]:
    """Each judged request's decode rate ÷ the mean rate of the requests decoding beside it: the
    requests of `pool` (itself included), each weighted by the share of its decode span they
    shared, w_j = overlap(i, j) ÷ span(i).

    Fairness is between requests served at the same time: a host-wide slowdown that hits every
    stream of one round alike is not unfairness, while a stream served at half the rate of those
    beside it is, however long its requests then last."""
    # a response read in one piece has no decode span to share (first token = end): no peers
    spans = {id(e): (t, e.end_ns) for e in pool if (t := first_token_ns(e)) is not None and e.end_ns > t}
    rates = {id(e): r for e in pool if id(e) in spans and (r := rate_of(e)) is not None}
    out = []
    for e in judged:
        if id(e) not in rates:
            continue
        me = spans[id(e)]
        length = me[1] - me[0]
        weights = [(_overlap_ns(me, spans[id(p)]) / length, rates[id(p)]) for p in pool if id(p) in rates]
        total = sum(w for w, _ in weights)  # ≥ 1: the request overlaps itself wholly
        out.append(rates[id(e)] / (sum(w * r for w, r in weights) / total))
    return out


def backlogged_share(events: Sequence[RequestEvent], window: tuple[int, int], slots: int) -> float:
    """Share of the window during which more requests were in flight (sent, not ended) than the
    server has slots: F3's premise that the clients stay backlogged."""
    start, end = window
    if end <= start:
        return 0.0
    steps = sorted([(max(e.sent_ns, start), 1) for e in events if e.sent_ns < end and e.end_ns > start]
                   + [(min(e.end_ns, end), -1) for e in events if e.sent_ns < end and e.end_ns > start])
    busy, level, t_prev = 0, 0, start
    for t, d in steps:
        if level > slots:
            busy += t - t_prev
        level, t_prev = level + d, t
    if level > slots:
        busy += end - t_prev
    return busy / (end - start)
