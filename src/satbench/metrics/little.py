"""Little's-law check (DESIGN.md §5): in a closed loop, N ≈ X_req · E2E_mean.

X and E2E are taken per stream between its first and last completion inside the steady
window: X_s = (k_s − 1) ÷ (t_last − t_first) and E2E_s = mean E2E of its completions 2..k_s,
so N_little = Σ_s X_s · E2E_s = Σ_s Σ_{i≥2} E2E_i ÷ (t_last − t_first). Counting whole
completions over the window instead is off by up to E2E ÷ window (13 % with eight requests
per stream), which would flag healthy levels. The gap from N is the time streams spend
between requests (the client's own lag) or requests the loop failed to keep in flight.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

from satbench.config import Strict
from satbench.events import RequestEvent

TOLERANCE = 0.05


class LittleCheck(Strict):
    n_expected: int
    n_from_little: float
    relative_error: float
    within_tolerance: bool
    tolerance: float = TOLERANCE
    streams_used: int


def stream_occupancy(completed: Sequence[RequestEvent]) -> tuple[float, int] | None:
    """Σ over streams of Σ_{i≥2} E2E_i ÷ (t_last − t_first); streams with < 2 completions skipped."""
    by_stream: dict[int, list[RequestEvent]] = defaultdict(list)
    for ev in completed:
        by_stream[ev.stream].append(ev)
    total, used = 0.0, 0
    for evs in by_stream.values():
        if len(evs) < 2:
            continue
        evs.sort(key=lambda e: e.end_ns)
        span = evs[-1].end_ns - evs[0].end_ns
        if span <= 0:
            continue
        total += sum(e.end_ns - e.sent_ns for e in evs[1:]) / span
        used += 1
    return (total, used) if used else None


def littles_law(n: int, per_repetition: Sequence[Sequence[RequestEvent]]) -> LittleCheck | None:
    """Mean over repetitions of N_little (see module docstring), scaled to all N streams from
    those with ≥ 2 completions in the window (each stream of a closed loop holds ≈ 1 request);
    flagged beyond 5 % from N. A stream with one completion says nothing about its occupancy,
    so it must not count as an empty one."""
    values = [v for reqs in per_repetition if (v := stream_occupancy(reqs)) is not None]
    if not values:
        return None
    l_value = sum(total * n / used for total, used in values) / len(values)
    rel = abs(l_value - n) / n
    return LittleCheck(n_expected=n, n_from_little=l_value, relative_error=rel,
                       within_tolerance=rel <= TOLERANCE, streams_used=min(u for _, u in values))
