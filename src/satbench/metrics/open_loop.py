"""One open-loop rate's figures (load/open_loop.py): what a router's caller sees at R requests/s.

Latencies are taken *from arrival* (`targeted_ns`, the scheduled Poisson arrival), so a server that
falls behind shows it as a growing client-side wait instead of as a slower load, as it would in a
closed loop. Every figure comes from the rate's measured events and its level marks; each formula
is in its field's description or its function's docstring.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from pydantic import Field

from satbench.config.schema import SloConfig
from satbench.metrics import latency
from satbench.metrics.stats import FEW_SAMPLES, Distribution, distribution
from satbench.records.events import LevelMark, RequestEvent
from satbench.records.record import Record

FELL_BEHIND = "fell_behind"  # the server completed clearly fewer requests/s than arrived
FEW = "few_samples"  # fewer than FEW_SAMPLES requests: read the p95s with their CIs
INCOMPLETE = "incomplete"  # the rate's level did not end complete (its mark says why)
KEEP_UP = 0.9  # completed ÷ arrival rate below this: FELL_BEHIND


class RateResult(Record):
    """One open-loop rate of one lane (scenario "open"); times in ms unless the name says otherwise."""

    rate_rps: float = Field(description="offered Poisson arrival rate, requests/s")
    position: int = Field(description="the rate's 1-based position in the lane's rates (its events' level)")
    max_concurrency: int = Field(description="requests in flight at most; later arrivals waited in the "
                                 "client")
    status: str = Field(description="complete, failed, interrupted, or missing (no end mark)")
    reason: str | None = None
    requests: int = Field(description="measured arrivals recorded")
    ok: int
    errors: dict[str, int] = Field(default_factory=dict, description="failed requests by error type")
    duration_s: float | None = Field(description="first arrival → last end")
    arrival_rps: float | None = Field(description="realised arrival rate: (requests − 1) ÷ (last − "
                                      "first arrival)")
    completed_rps: float | None = Field(description="successful requests ÷ duration_s")
    output_tok_per_s: float | None = Field(description="output tokens of successful requests ÷ duration_s")
    goodput_rps: float | None = Field(description="requests meeting the SLO (from arrival) ÷ duration_s; "
                                      "null without an SLO")
    slo_attainment: float | None = Field(description="requests meeting the SLO ÷ requests (a failed one "
                                         "never meets it); null without an SLO")
    max_in_flight: int = Field(description="most requests between sent_ns and end_ns at once")
    ttft_ms: Distribution = Field(description="from the send, as in the closed loop")
    ttft_from_arrival_ms: Distribution
    tpot_ms: Distribution
    e2e_from_arrival_ms: Distribution
    wait_ms: Distribution = Field(description="sent_ns − targeted_ns: waiting for a free in-flight slot "
                                  "(and the client's own lateness)")
    warnings: list[str] = Field(default_factory=list, description=f"{FEW}, {FELL_BEHIND}, {INCOMPLETE}")


def _met(e: RequestEvent, slo: SloConfig) -> bool:
    """A successful request whose TTFT from arrival, TPOT and (if set) E2E from arrival meet the SLO."""
    ttft, tpot = latency.ttft_from_arrival_ms(e), latency.tpot_ms(e)
    return (e.ok and ttft is not None and ttft <= slo.p95_ttft_ms
            and (tpot is None or tpot <= slo.p95_tpot_ms)
            and (slo.p95_e2e_ms is None or latency.e2e_from_arrival_ms(e) <= slo.p95_e2e_ms))


def max_in_flight(events: Sequence[RequestEvent]) -> int:
    """The most requests in flight (sent_ns ≤ t < end_ns) at any moment."""
    edges = sorted([(e.sent_ns, 1) for e in events] + [(e.end_ns, -1) for e in events])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def rate_result(rate_rps: float, position: int, cap: int, events: Sequence[RequestEvent],
                marks: Sequence[LevelMark], slo: SloConfig | None) -> RateResult:
    """The figures of one rate from its measured events and its marks (see RateResult's fields)."""
    ends = [m for m in marks if m.kind == "level_end"]
    status, reason = (ends[-1].status, ends[-1].reason) if ends else ("missing", "the rate has no end mark")
    done = [e for e in events if e.ok]
    span_ns = (max(e.end_ns for e in events) - min(e.targeted_ns for e in events)) if events else 0
    duration = span_ns / 1e9 if span_ns > 0 else None
    arrivals = sorted(e.targeted_ns for e in events)
    arrival_rps = ((len(arrivals) - 1) / ((arrivals[-1] - arrivals[0]) / 1e9)
                   if len(arrivals) > 1 and arrivals[-1] > arrivals[0] else None)
    completed = len(done) / duration if duration else None
    ttft_a = distribution([v for e in done if (v := latency.ttft_from_arrival_ms(e)) is not None])
    tpot = distribution([v for e in done if (v := latency.tpot_ms(e)) is not None])
    e2e_a = distribution([latency.e2e_from_arrival_ms(e) for e in done])
    met = sum(_met(e, slo) for e in events) if slo is not None else None
    warnings = [FEW] if len(events) < FEW_SAMPLES else []
    if completed is not None and arrival_rps and completed < KEEP_UP * arrival_rps:
        warnings.append(FELL_BEHIND)
    if status != "complete":
        warnings.append(INCOMPLETE)
    return RateResult(
        rate_rps=rate_rps, position=position, max_concurrency=cap, status=status, reason=reason,
        requests=len(events), ok=len(done),
        errors=dict(Counter(e.error.type for e in events if e.error is not None)),
        duration_s=duration, arrival_rps=arrival_rps, completed_rps=completed,
        output_tok_per_s=sum(e.output_tokens for e in done) / duration if duration else None,
        goodput_rps=(met / duration if duration else None) if met is not None else None,
        slo_attainment=met / len(events) if met is not None and events else None,
        max_in_flight=max_in_flight(events),
        ttft_ms=distribution([v for e in done if (v := latency.ttft_ms(e)) is not None]),
        ttft_from_arrival_ms=ttft_a, tpot_ms=tpot, e2e_from_arrival_ms=e2e_a,
        wait_ms=distribution([latency.wait_ms(e) for e in events]), warnings=warnings,
    )
