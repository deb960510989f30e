"""Steady-window throughput (docs/definitions.md#throughput): tokens and requests per second of one
repetition.

Rates are taken per stream from the start of a whole request to the window's end. In a closed
loop a stream sends its next request the moment the previous one ends, so from the send of its
request that was running when the steady window opened (or the first one sent after) to the
window's end, the stream did nothing but run requests, all under the level's full load. Per
stream s, with A_s that send and E the window's end:

    X_s = Σ_r amount(r) · share(r) ÷ (E − A_s),   share(r) = (min(end_r, E) − sent_r) ÷ (end_r − sent_r)
    X   = N ÷ used · Σ_s X_s

over the stream's measured requests sent in [A_s, E] and the `used` streams with such a request
(the others' rates are taken to be alike). A request's amount (its output tokens, its prompt once
prefilled, 1 if it succeeded) is spread evenly over its life: whole for the requests done by E,
the share of its life elapsed by E for the one still running then. A request stalled at E, whose
life runs far past it, thus holds its stream's rate down by the time it took; one that is merely
queued or prefilling at E is not counted as if it had stalled.

A level measured once (the adaptive sweep's `one_repetition_ci = batch_means`) has no spread over
repetitions to give its CI. Its steady window is cut into BATCHES equal spans, each span's rate
taken as its measured chunks' tokens ÷ its length (`batch_rates`), and the CI's half-width is

    h = max(t_{k−1} · sd(b) ÷ √k ÷ mean(b), ONE_REPETITION_CI_FLOOR) · X

(`one_repetition_half_width`; k spans b, t the Student-t 0.975 quantile). The batch means see the
noise inside the run; the floor stands for what one run cannot see, how the next run would differ
(repetitions of one level on a quiet 2-core host differ by up to ~7 %).

Not used, and why: all the window's tokens ÷ its length is biased when the streams move in step
(the window opens at a first token, so it holds one prefill fewer than its requests took);
counting only requests that end inside the window hides a stream stalled at its end; crediting
the running request by the tokens it delivered by E treats a queue or a prefill at E as a stall.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence

from satbench.metrics.latency import first_token_ns
from satbench.metrics.quantiles import t_quantile_975
from satbench.metrics.window import SteadyWindow
from satbench.records.events import CANCELLED, RequestEvent

BATCHES = 8  # equal spans of a steady window, for the batch means of a level measured once
ONE_REPETITION_CI_FLOOR = 0.10  # a level measured once: its throughput CI is at least ± this fraction


def output_tokens_in_window(events: list[RequestEvent], w: SteadyWindow) -> int:
    """Σ tokens of measured chunks with w.start ≤ t ≤ w.end (failed requests' delivered tokens count)."""
    lo, hi = w.start_ns, w.end_ns  # w.contains(t), without a call per chunk
    return sum(n for ev in events if ev.phase == "measured" for t, n in ev.chunks if lo <= t <= hi)


def stream_spans(events: list[RequestEvent], w: SteadyWindow) -> dict[int, tuple[int, list[RequestEvent]]]:
    """Per stream: (A_s, its measured requests sent in [A_s, w.end]), A_s the send of its first
    measured request that had not ended when the window opened. Streams with none are absent."""
    by_stream: dict[int, list[RequestEvent]] = defaultdict(list)
    for ev in events:
        if ev.phase == "measured" and ev.end_ns >= w.start_ns and ev.sent_ns < w.end_ns:
            by_stream[ev.stream].append(ev)
    out = {}
    for stream, evs in by_stream.items():
        evs.sort(key=lambda e: e.sent_ns)
        out[stream] = (evs[0].sent_ns, evs)
    return out


def throughput_streams(events: list[RequestEvent], w: SteadyWindow) -> int:
    """How many streams the rates are taken from (a request of theirs ran while the window was open)."""
    return len(stream_spans(events, w))


def span_rate(events: list[RequestEvent], w: SteadyWindow, n_streams: int,
              credit: Callable[[RequestEvent, int], float]) -> float | None:
    """X = N ÷ used · Σ_s Σ_r credit(r, E) ÷ (E − A_s) (module docstring); None when no stream
    had a request running in the window."""
    total, used = 0.0, 0
    for start_ns, evs in stream_spans(events, w).values():
        span_ns = w.end_ns - start_ns
        if span_ns <= 0:
            continue
        total += sum(credit(e, w.end_ns) for e in evs) / (span_ns / 1e9)
        used += 1
    return total * n_streams / used if used else None


def share_by(ev: RequestEvent, t_ns: int) -> float:
    """The share of the request's life (sent → end) elapsed by `t_ns`: 1 when it ended by then."""
    if ev.end_ns <= t_ns:
        return 1.0
    life_ns = ev.end_ns - ev.sent_ns
    return max(0.0, (t_ns - ev.sent_ns) / life_ns) if life_ns > 0 else 0.0


def output_tokens_of(ev: RequestEvent) -> int:
    """Tokens the request delivered (a failed request's partial answer included)."""
    return sum(n for _, n in ev.chunks)


def prompt_tokens_of(ev: RequestEvent) -> int:
    """The request's prompt as the server counted it: llama.cpp's `timings.prompt_n + cache_n`,
    else the server's usage count, else the requested length; 0 when no token ever came (its
    prefill may never have run)."""
    if first_token_ns(ev) is None:
        return 0
    if ev.timings is not None and ev.timings.prompt_n is not None:
        return ev.timings.prompt_n + (ev.timings.cache_n or 0)
    return counted_prompt_tokens(ev)


def counted_prompt_tokens(ev: RequestEvent) -> int:
    """The request's prompt as the server counted it when it said (usage.prompt_tokens, llama.cpp's
    tokens_evaluated: with the chat endpoint, its template's tokens included), else the length the
    workload asked for."""
    return ev.server_prompt_tokens if ev.server_prompt_tokens is not None else ev.prompt_tokens


def output_tok_per_s(events: list[RequestEvent], w: SteadyWindow, n_streams: int) -> float | None:
    """Output tok/s = N ÷ used · Σ_s Σ_r output tokens(r) · share(r) ÷ (E − A_s) (module docstring)."""
    return span_rate(events, w, n_streams, lambda e, t: output_tokens_of(e) * share_by(e, t))


def total_tok_per_s(events: list[RequestEvent], w: SteadyWindow, n_streams: int) -> float | None:
    """Total tok/s = as output tok/s, counting each request's prompt and output tokens."""
    return span_rate(events, w, n_streams,
                     lambda e, t: (prompt_tokens_of(e) + output_tokens_of(e)) * share_by(e, t))


def req_per_s(events: list[RequestEvent], w: SteadyWindow, n_streams: int) -> float | None:
    """Req/s = as output tok/s, counting 1 per successful request (0 for a failed one)."""
    return span_rate(events, w, n_streams, lambda e, t: (1.0 if e.ok else 0.0) * share_by(e, t))


def completed_in_window(events: list[RequestEvent], w: SteadyWindow) -> list[RequestEvent]:
    """Measured requests counted by completion time: successful ones with end_ns in the window."""
    return [ev for ev in events if ev.phase == "measured" and ev.ok and w.contains(ev.end_ns)]


def failed_in_window(events: list[RequestEvent], w: SteadyWindow) -> list[RequestEvent]:
    """Measured requests that failed, counted by the time they ended: end_ns in the window (not
    those cancelled when satbench stopped the level: that is not the server missing an SLO)."""
    return [ev for ev in events if ev.phase == "measured" and ev.error is not None
            and ev.error.type != CANCELLED and w.contains(ev.end_ns)]


def batch_rates(events: list[RequestEvent], w: SteadyWindow, k: int = BATCHES) -> list[float]:
    """Output tok/s in each of `k` equal spans of the window: the measured chunks' tokens stamped in
    the span ÷ its length (a chunk on a boundary counts in the later span, the window's end in the
    last); empty when the window has no length."""
    span_ns = w.end_ns - w.start_ns
    if span_ns <= 0:
        return []
    counts = [0] * k
    lo, hi = w.start_ns, w.end_ns
    for ev in events:
        if ev.phase == "measured":
            for t, n in ev.chunks:
                if lo <= t <= hi:
                    counts[min(k - 1, (t - lo) * k // span_ns)] += n
    return [c / (span_ns / k / 1e9) for c in counts]


def one_repetition_half_width(x: float, rates: Sequence[float]) -> float | None:
    """The 95 % CI half-width (tok/s) of a level measured once, of throughput `x`, from its window's
    batch rates (module docstring); None with fewer than 2 rates or none above 0."""
    k = len(rates)
    mean = statistics.fmean(rates) if k >= 2 else 0.0
    if k < 2 or mean <= 0:
        return None
    rel = t_quantile_975(k - 1) * statistics.stdev(rates) / math.sqrt(k) / mean
    return max(rel, ONE_REPETITION_CI_FLOOR) * x
