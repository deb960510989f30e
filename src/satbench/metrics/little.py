"""Little's-law check (docs/definitions.md#littles-law-check): in a closed loop, N ≈ X_req · E2E_mean.

Per repetition, X_req is its reported req/s (throughput.req_per_s: per stream over whole requests,
so without the window's boundary bias) and E2E_mean the mean E2E of the successful requests
completing in its window; the check takes the mean of X_req · E2E_mean over the repetitions and
flags it beyond 5 % from N. The gap is time the streams spent between requests (the client's own
lag), requests that failed (they held a stream but are not in X_req), or a reported rate that
does not describe what the server did: the check reads the figure the level publishes.
"""

from __future__ import annotations

from collections.abc import Sequence

from satbench.records.events import RequestEvent
from satbench.records.record import Record

TOLERANCE = 0.05


class LittleCheck(Record):
    n_expected: int
    n_from_little: float
    relative_error: float
    within_tolerance: bool
    tolerance: float = TOLERANCE
    repetitions_used: int


def in_flight_from_little(req_per_s: float, completed: Sequence[RequestEvent]) -> float | None:
    """N_little = X_req · mean E2E (seconds) of the successful requests completing in the window."""
    if not completed:
        return None
    mean_e2e_s = sum(e.end_ns - e.sent_ns for e in completed) / len(completed) / 1e9
    return req_per_s * mean_e2e_s


def littles_law(n: int,
                per_repetition: Sequence[tuple[float | None, Sequence[RequestEvent]]]) -> LittleCheck | None:
    """Mean over repetitions of X_req · E2E_mean (module docstring), flagged beyond 5 % from N;
    None when no repetition has both a rate and a completed request."""
    values = [v for rate, done in per_repetition if rate is not None
              and (v := in_flight_from_little(rate, done)) is not None]
    if not values:
        return None
    l_value = sum(values) / len(values)
    rel = abs(l_value - n) / n
    return LittleCheck(n_expected=n, n_from_little=l_value, relative_error=rel,
                       within_tolerance=rel <= TOLERANCE, repetitions_used=len(values))
