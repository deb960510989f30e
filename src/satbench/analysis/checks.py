"""The lane's fairness verdicts: runs its chosen checks (all six by default) over its events.

Events are grouped by check (warmups dropped except for the closed-loop F1 and F3), the lane is
calibrated from its CAL requests, and each check's `Verdict` gets the concurrency it ran at. The
fairness runner decides its top-ups with `check_verdict` on the events so far: the very function
`analyze` judges the finished run with.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from satbench.analysis.fairness_checks import backlogged_clients, equal_requests, mixed_sizes
from satbench.analysis.guards import late_stamped, solo_spread
from satbench.analysis.starvation_checks import decode_stall, prompt_admission, prompt_vs_prompt
from satbench.analysis.verdicts import Verdict, calibrate, inconclusive
from satbench.config.schema import CHECK_NAMES, CheckName, FairnessConfig
from satbench.metrics.latency import ttft_ms
from satbench.records.events import RequestEvent
from satbench.workload.fairness_plan import FairnessPlan, check_request_count, in_flight

CLOSED_LOOP = ("F1", "F3")  # their warmups are part of the closed loop, and judged with it
# the lone references the steadiness guard (guards.solo_spread) judges, and the role of the second set
# the runner sends when the first was too unsteady: F2's sizes alone (E2E, by seq) and S3's prompt
# alone (TTFT)
REFERENCE_ROLES: dict[CheckName, tuple[str, str]] = {"F2": ("alone", "alone_again"),
                                                     "S3": ("solo", "solo_again")}


def latest_references(check: CheckName, events: Sequence[RequestEvent]) -> list[RequestEvent]:
    """`events` with the check's latest set of lone references under their first role: the second set
    (`REFERENCE_ROLES`) replaces the first when the runner sent one (`unsteady_references`)."""
    if check not in REFERENCE_ROLES:
        return list(events)
    first, again = REFERENCE_ROLES[check]
    if not any(e.role == again for e in events):
        return list(events)
    return [e.model_copy(update={"role": first}) if e.role == again else e
            for e in events if e.role != first]


def unsteady_references(check: CheckName, events: Sequence[RequestEvent]) -> str | None:
    """Why the check's latest lone references cannot serve as its reference (`solo_spread` on the
    timing its verdict reads: F2's E2E per size, S3's TTFT of the requests stamped in time), or None."""
    if check not in REFERENCE_ROLES:
        return None
    role = REFERENCE_ROLES[check][0]
    # a failed reference has no timing: the verdict says the check's requests failed, not this guard
    refs = [e for e in latest_references(check, [e for e in events if e.check == check])
            if e.role == role and e.ok]
    by_size: dict[int, list[float | None]] = {}
    for e in refs:
        if check == "F2":
            by_size.setdefault(e.seq, []).append((e.end_ns - e.sent_ns) / 1e6)
        elif not late_stamped(e):
            by_size.setdefault(0, []).append(ttft_ms(e))
    return next((why for timed in by_size.values() if (why := solo_spread(timed))), None)


def check_verdict(check: CheckName, events: Sequence[RequestEvent], plan: FairnessPlan,
                  cfg: FairnessConfig) -> Verdict:
    """One check's verdict from the lane's fairness events (its own and the calibration's)."""
    mine = latest_references(check, [e for e in events
                                     if e.check == check and (check in CLOSED_LOOP or e.phase != "warmup")])
    cal = calibrate([e for e in events if e.check == "CAL" and e.phase != "warmup"])
    judge = {"F1": lambda: equal_requests(mine, plan, cal, cfg),
             "F2": lambda: mixed_sizes(mine, plan, cfg),
             "F3": lambda: backlogged_clients(mine, plan, cfg),
             "S1": lambda: decode_stall(mine, plan, cal, cfg),
             "S2": lambda: prompt_admission(mine, plan, cfg),
             "S3": lambda: prompt_vs_prompt(mine, plan, cal, cfg)}
    return judge[check]().model_copy(update={"concurrency": in_flight(plan, check) or None})


def lane_verdicts(events: Sequence[RequestEvent], plan: FairnessPlan, cfg: FairnessConfig,
                  llamacpp: bool, lost: str | None = None) -> list[Verdict]:
    """The verdicts of the lane's chosen checks (all six by default) from its fairness events;
    `lost` (why the server was lost) names the cause for the checks that never sent a request."""
    if not llamacpp:
        why = "the server is not llama.cpp: its slots and batch size are unknown"
        return [inconclusive(c, why) for c in cfg.checks]
    ran = {c: check_verdict(c, events, plan, cfg) for c in CHECK_NAMES
           if c in cfg.checks and any(e.check == c for e in events)}
    out = []
    for c in CHECK_NAMES:
        if c not in cfg.checks:
            continue
        if c in ran:
            out.append(ran[c])
            continue
        skipped = f"not run: {lost}" if lost is not None else _not_needed(c, ran.values(), plan, cfg)
        if skipped is None:
            out.append(check_verdict(c, events, plan, cfg))
            continue
        concurrency = in_flight(plan, c) or None
        out.append(inconclusive(c, skipped[:600]).model_copy(update={"concurrency": concurrency}))
    return out


def _not_needed(check: CheckName, ran: Iterable[Verdict], plan: FairnessPlan,
                cfg: FairnessConfig) -> str | None:
    """Why `check` sent nothing when a check that ran failed at no more in flight than it puts: the
    checks that cap an adaptive sweep stop there (run/fairness.FairnessRunner.run_all), as this one
    could forbid only levels already forbidden. None when no such failure explains it."""
    width = in_flight(plan, check)
    failed = [v for v in ran if v.verdict == "fail" and v.concurrency and v.concurrency <= width]
    if not failed or check_request_count(plan, cfg, check) == 0:
        return None
    first = min(failed, key=lambda v: v.concurrency or 0)
    return (f"not run: {first.check} ({first.name}) failed at {first.concurrency} in flight, which already "
            f"forbids {first.concurrency} or more; this check puts {width} in flight, so it could forbid "
            "only levels already forbidden")
