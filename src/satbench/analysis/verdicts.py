"""The verdict model and the pieces the six checks share (docs/fairness.md; the rule:
docs/definitions.md#verdict).

A `Verdict` carries its statistics (each an estimate with its CI, its bound and its decision:
analysis/intervals), the rounds it took, and how the bounds were derived from this lane's own
measurements: prefill rate at N = 1 and decode iteration time (`Calibration`). A check fails when
any statistic fails, passes when all pass, and is otherwise marginal; `inconclusive` (with its
reason) replaces a verdict whenever the evidence is missing or tainted. The checks themselves live
in analysis/fairness_checks (F1-F3) and analysis/starvation_checks (S1-S3); analysis/checks runs
the lane's chosen ones.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field

from satbench.analysis.intervals import Statistic
from satbench.config.schema import CheckName
from satbench.metrics.latency import first_token_ns, ttft_ms
from satbench.metrics.throughput import counted_prompt_tokens
from satbench.records.events import RequestEvent, itl_ms
from satbench.records.record import Record
from satbench.workload.fairness_plan import NAMES

MS = 1e6
NO_TRUSTED = "cannot be timed, leaving no reference or no measured request"


VerdictKind = Literal["pass", "fail", "marginal", "inconclusive"]


class Verdict(Record):
    check: CheckName
    name: str
    verdict: VerdictKind = Field(description="fail: a statistic's CI lies beyond its bound; pass: every "
                                 "CI lies within; marginal: a CI still straddles its bound at the cap "
                                 "(it does not bind the recommendation); inconclusive: the evidence is "
                                 "missing or tainted (reason)")
    statistics: list[Statistic] = Field(default_factory=list, description="what decides, each with its CI")
    measured: dict[str, float | None] = Field(default_factory=dict, description="further figures, "
                                              "reported only")
    derivation: str = ""
    reason: str | None = None
    samples: int = 0
    rounds: int = Field(0, description="rounds run: the base rounds and the top-ups")
    rounds_max: int = Field(0, description="the cap on rounds")
    concurrency: int | None = Field(None, description="requests in flight while the check ran")


class Calibration(Record):
    prefill_tok_per_s: float | None
    decode_iteration_ms: float | None


def make_verdict(check: CheckName, verdict: VerdictKind, **kw: Any) -> Verdict:
    return Verdict(check=check, name=NAMES[check], verdict=verdict, **kw)


def inconclusive(check: CheckName, reason: str, samples: int = 0) -> Verdict:
    return make_verdict(check, "inconclusive", reason=reason, samples=samples)


def judged(check: CheckName, statistics: list[Statistic], **kw: Any) -> Verdict:
    """The verdict of a check's statistics: fail when any fails, pass when all pass, else marginal."""
    kinds = {s.decision for s in statistics}
    kind: VerdictKind = "fail" if "fail" in kinds else "pass" if kinds == {"pass"} else "marginal"
    return make_verdict(check, kind, statistics=statistics, **kw)


def rounds_of(events: Sequence[RequestEvent]) -> int:
    """How many rounds (distinct repetitions) the events span."""
    return len({e.repetition for e in events})


def request_errors(events: Sequence[RequestEvent]) -> str | None:
    bad = [e for e in events if not e.ok]
    if not bad:
        return None
    kinds = sorted({e.error.type for e in bad if e.error})
    return f"{len(bad)} request(s) failed ({', '.join(kinds)})"


def median_or_none(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def of_role(events: Sequence[RequestEvent], role: str) -> list[RequestEvent]:
    return [e for e in events if e.role == role]


def calibrate(cal: Sequence[RequestEvent]) -> Calibration:
    """Prefill tok/s = median prompt_n ÷ prompt_ms of the lone prefill requests (the counted prompt
    ÷ TTFT when the server gives no timings); decode iteration = median ITL of the lone decode request."""
    rates = []
    for e in of_role(cal, "prefill"):
        if not e.ok:
            continue
        if e.timings and e.timings.prompt_n and e.timings.prompt_ms:
            rates.append(e.timings.prompt_n / e.timings.prompt_ms * 1000.0)
        elif (t := ttft_ms(e)) is not None:
            rates.append(counted_prompt_tokens(e) / t * 1000.0)
    itls = [g for e in of_role(cal, "decode") if e.ok for g in itl_ms(e)]
    return Calibration(prefill_tok_per_s=median_or_none(rates), decode_iteration_ms=median_or_none(itls))


def decode_rate(e: RequestEvent) -> float | None:
    """Per-request decode rate = (output tokens − 1) ÷ (end − first token), tokens/s."""
    first = first_token_ns(e)
    if first is None or e.output_tokens < 2 or e.end_ns <= first:
        return None
    return (e.output_tokens - 1) / ((e.end_ns - first) / 1e9)


def served_decode_rate(e: RequestEvent) -> float | None:
    """The rate the server decoded at = (predicted_n − 1) ÷ predicted_ms from its own timings,
    tokens/s; the client's decode_rate when the server gives none. A client that reads a stream
    late sees its chunks bunched (on a loaded host, 60 ms of decoding arrived within 16 ms), which
    is not the scheduler's doing."""
    t = e.timings
    if t is not None and t.predicted_n is not None and t.predicted_n >= 2 and t.predicted_ms:
        return (t.predicted_n - 1) / (t.predicted_ms / 1000.0)
    return decode_rate(e)


def jain_index(xs: Sequence[float]) -> float:
    """Jain = (Σx)² ÷ (n·Σx²); 1 when all equal."""
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))
