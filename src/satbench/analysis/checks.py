"""The lane's fairness verdicts: runs its chosen checks (all six by default) over its events.

Events are grouped by check (warmups dropped except for the closed-loop F1 and F3), the lane is
calibrated from its CAL requests, and each check's `Verdict` gets the concurrency it ran at.
"""

from __future__ import annotations

from collections.abc import Sequence

from satbench.analysis.fairness_checks import f1, f2, f3
from satbench.analysis.starvation_checks import s1, s2, s3
from satbench.analysis.verdicts import Verdict, calibrate, inconclusive
from satbench.config.schema import CHECK_NAMES, FairnessConfig
from satbench.records.events import RequestEvent
from satbench.workload.fairness_plan import FairnessPlan


def lane_verdicts(events: Sequence[RequestEvent], plan: FairnessPlan, cfg: FairnessConfig,
                  llamacpp: bool, lost: str | None = None) -> list[Verdict]:
    """The verdicts of the lane's chosen checks (all six by default) from its fairness events;
    `lost` (why the server was lost) names the cause for the checks that never sent a request."""
    if not llamacpp:
        why = "the server is not llama.cpp: its slots and batch size are unknown"
        return [inconclusive(c, why) for c in cfg.checks]
    by = {c: [e for e in events if e.check == c and e.phase != "warmup"]
          for c in ("CAL", "F2", "S1", "S2", "S3")}
    closed = {c: [e for e in events if e.check == c] for c in ("F1", "F3")}
    cal = calibrate(by["CAL"])
    verdicts = {"F1": lambda: f1(closed["F1"], plan, cal, cfg), "F2": lambda: f2(by["F2"], plan, cfg),
                "F3": lambda: f3(closed["F3"], plan, cfg), "S1": lambda: s1(by["S1"], plan, cal, cfg),
                "S2": lambda: s2(by["S2"], plan, cfg), "S3": lambda: s3(by["S3"], plan, cal, cfg)}
    level = {"F1": plan.f1_streams, "F2": len(plan.f2_sizes), "F3": plan.f3_clients,
             "S1": plan.s1_decoders + 1, "S2": plan.s2_decoders + 1, "S3": 2}
    out = []
    for c in CHECK_NAMES:
        if c in cfg.checks:
            ran = any(e.check == c for e in events)
            v = verdicts[c]() if ran or lost is None else inconclusive(c, f"not run: {lost}"[:600])
            v.concurrency = level[c] or None
            out.append(v)
    return out
