"""The rules of recommendations.json (docs/definitions.md#recommended-concurrency): per lane and
machine, how many requests at once.

recommended = the largest measured level ≤ min(knee, SLO bound, slots, slots that fit in memory,
fairness cap, server-failure cap, error cap), with the binding reason named; None when no measured
level is that low (the capability report then refuses to advertise the lane as measured).
Everything comes from results.json; the file is byte-identical for the same run directory except
`created_at`. Each lane names the workload its figures hold for (`profile_of` its workload in
results.json). The file's model and schema are saturation/recommendations_file.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path
from typing import Literal

from satbench.analysis.results import RESULTS_FILE, LaneResult, ResultsFile, read_results
from satbench.config.workload_profile import profile_of
from satbench.errors import RunDirError
from satbench.metrics.level_result import LevelResult
from satbench.metrics.stats import Distribution, Interval
from satbench.records.artifacts import close, older_minor, only_keys_of
from satbench.saturation.bound import (
    Resource,
    busy_slots,
    busy_slots_variant,
    saturated_by,
)
from satbench.saturation.confidence import confidence
from satbench.saturation.knee import Knee, kneedle, marginal_gain_knee, points_of
from satbench.saturation.open_rate import max_rate
from satbench.saturation.recommendations_file import (
    ERROR_SHARE_MAX,
    Binding,
    Expected,
    LaneRecommendation,
    LevelSummary,
    Reason,
    RecommendationsFile,
    ServerConfirmation,
)
from satbench.saturation.slo import SloStanding, slo_standing
from satbench.saturation.usl import fit_usl


def _p95(d: Distribution) -> tuple[float | None, Interval | None]:
    return d.p95, d.ci.get("p95")


def fairness_cap(lane: LaneResult) -> tuple[int | None, list[str]]:
    """A check that failed at concurrency c forbids recommending c or more
    (docs/definitions.md#fairness-cap)."""
    failed = [v for v in lane.fairness if v.verdict == "fail" and v.concurrency]
    if not failed:
        return None, []
    cap = min(c for v in failed if (c := v.concurrency)) - 1
    return max(cap, 1), [f"{v.check} ({v.name}) failed at {v.concurrency} in flight" for v in failed]


def fairness_marginal(lane: LaneResult) -> list[str]:
    """The checks left marginal (a CI straddling its bound after the top-ups): a warning, not a cap."""
    def end(x: float | None, unbounded: str) -> str:
        return unbounded if x is None else f"{x:.4g}"
    return [f"{v.check} ({v.name}) marginal at {v.concurrency} in flight: "
            + "; ".join(f"{s.name} {s.estimate:.4g} [{end(s.ci_low, '−∞')}, {end(s.ci_high, '∞')}] vs "
                        f"bound {s.bound:.4g}" for s in v.statistics if s.decision == "marginal")
            + f" after {v.rounds} of {v.rounds_max} rounds" for v in lane.fairness if v.verdict == "marginal"]


def fairness_unverified(lane: LaneResult, answer: int) -> tuple[int | None, list[str]]:
    """The checks inconclusive at a concurrency at or below `answer`: fairness there is not verified
    (docs/definitions.md#unverified-fairness). (The lowest such concurrency, a line per check), or
    (None, [])."""
    open_ = [v for v in lane.fairness if v.verdict == "inconclusive" and v.concurrency
             and v.concurrency <= answer]
    if not open_:
        return None, []
    return min(c for v in open_ if (c := v.concurrency)), [
        f"{v.check} ({v.name}) inconclusive at {v.concurrency} in flight: {v.reason}" for v in open_]


def server_failure_cap(lane: LaneResult) -> tuple[int | None, list[str]]:
    """A server that crashed or stopped answering with c requests in flight forbids recommending c
    or more: alone, in a fairness check, or while the run's other lanes ran with it (`together`:
    a node serves its lanes at once, so a level that fails beside them is not a safe limit;
    docs/definitions.md#server-failure-cap)."""
    failed = [f for f in lane.server_failures if f.level > 0]
    if not failed:
        return None, []
    return min(f.level for f in failed) - 1, [f.reason for f in failed]


def checks_cap(lane: LaneResult) -> tuple[int | None, str | None]:
    """The most the fairness checks allow, run before the lane's adaptive sweep: a check that failed
    at c, or a server that failed with c in flight, forbids c or more (`fairness_cap`,
    `server_failure_cap`), so the sweep climbs no higher. (cap, why), or (None, None)."""
    found = [(c, "; ".join(why)) for c, why in (fairness_cap(lane), server_failure_cap(lane))
             if c is not None]
    if not found:
        return None, None
    return min(found)


def failed_count(lv: LevelResult) -> int:
    """Measured requests that failed, but not those cancelled when satbench stopped the level."""
    return sum(lv.counts.server_errors().values())


def failed_share(lv: LevelResult) -> float:
    """Share of the level's measured requests that failed (every repetition, in window or not)."""
    c = lv.counts
    return failed_count(lv) / c.requests_measured if c.requests_measured else 0.0


def error_cap(levels: list[LevelResult]) -> tuple[int | None, list[str]]:
    """A level where more than ERROR_SHARE_MAX of the measured requests failed (timeouts, HTTP
    errors, cut streams) forbids recommending it or more: a router would see those failures
    (docs/definitions.md#error-cap)."""
    bad = [lv for lv in sorted(levels, key=lambda x: x.concurrency) if failed_share(lv) > ERROR_SHARE_MAX]
    if not bad:
        return None, []
    return bad[0].concurrency - 1, [
        f"N={lv.concurrency}: {failed_count(lv)} of {lv.counts.requests_measured} "
        "measured requests failed "
        f"({', '.join(f'{k}×{v}' for k, v in lv.counts.errors_by_type.items()) or 'errors'})"
        for lv in bad]


def confirmation(levels: list[LevelResult], at: int, slots: int | None) -> ServerConfirmation:
    """At the recommended level and the next one: are slots full, requests deferred, decode slower?
    (docs/definitions.md#server-side-confirmation)"""
    by_n = {lv.concurrency: lv for lv in levels}
    above = [n for n in sorted(by_n) if n > at]
    look = by_n[above[0]] if above else by_n[at]
    busy, variant = busy_slots(look), busy_slots_variant(look) or None
    deferred = look.occupancy.requests_deferred_max
    itl = {n: by_n[n].latency.itl_ms.p50 for n in sorted(by_n)}
    first, last = itl[min(itl)], itl[look.concurrency]
    saturated = bool(slots and busy is not None and busy >= 0.9 * slots)
    rising = bool(first and last and last > 1.2 * first)
    parts = [f"at N={look.concurrency}:"]
    parts.append(f"{busy:.1f} of {slots} slots busy {variant}" if busy is not None and slots
                 else "busy slots n/a")
    parts.append("deferred requests n/a" if deferred is None else
                 f"up to {deferred:.0f} request(s) deferred" if deferred else "no deferred requests")
    if first and last:
        parts.append(f"decode time per token {first:.1f} ms at N={min(itl)} → {last:.1f} ms")
    which = [w for w, on in (("slots full", saturated), ("requests queued", bool(deferred)),
                             ("per-token decode time rising", rising)) if on]
    parts.append("server-side signs of saturation: " + ", ".join(which) if which
                 else "no server-side sign of saturation")
    return ServerConfirmation(at_concurrency=look.concurrency, slots=slots,
                              busy_slots_per_decode=look.occupancy.decode_weighted_busy_slots,
                              busy_slots=busy, busy_slots_variant=variant,
                              requests_deferred_max=deferred, itl_p50_ms_by_level=itl,
                              slots_saturated=saturated,
                              requests_deferred=None if deferred is None else deferred > 0,
                              decode_time_rising=rising,
                              statement=f"{parts[0]} " + ", ".join(parts[1:]))


def knee_ceiling(lane: LaneResult, results: ResultsFile, levels: list[LevelResult],
                 crash_cap: int | None) -> int | None:
    """The level the knee is judged against (docs/definitions.md#knee-ceiling): the server's slot
    count, at most the lane's own ceiling (its highest level; config.LaneConfig.ceiling) and below a
    failed fairness check (`fairness_cap`: no level there may be recommended, so none there can move
    the knee); after a server failure, the highest level measured below it (the highest the server
    was seen to hold: no level between is tried); None when none of these is known."""
    slots = lane.runtime.total_slots
    cfg = next((c for c in results.config.lanes if c.name == lane.lane), None)
    held = max((lv.concurrency for lv in levels if lv.concurrency <= crash_cap), default=None) \
        if crash_cap is not None else None
    caps = [c for c in (slots, cfg.ceiling(slots) if cfg is not None else None, held, fairness_cap(lane)[0])
            if c]
    return min(caps) if caps else None


def _caps(lane: LaneResult, slo: SloStanding) -> list[tuple[Reason, int, str]]:
    """Every limit on the recommendation but the curve's own: (reason, the largest N it allows, why).
    The SLO is one where a level misses it or none is shown to meet it (`slo_late` adds the other)."""
    crash_cap, crashes = server_failure_cap(lane)
    err_cap, errs = error_cap(lane.levels)
    cap, failures = fairness_cap(lane)
    slots = lane.runtime.total_slots
    bounds: list[tuple[Reason, int, str]] = []
    if crash_cap is not None:
        bounds.append(("server_failed", crash_cap, "; ".join(crashes) + ": nothing at or above it is "
                                                                        "recommended"))
    if err_cap is not None:
        bounds.append(("errors", err_cap, "; ".join(errs) + f" (more than {ERROR_SHARE_MAX:.0%}): nothing "
                                                            "at or above it is recommended"))
    if cap is not None:
        bounds.append(("fairness", cap, "; ".join(failures) + ": nothing at or above it is recommended"))
    if lane.slo is not None and (slo.missed_at is not None or slo.bound is None):
        bounds.append(("slo", slo.bound or 0, slo.why))
    if slots:
        bounds.append(("slots", slots, f"the server has {slots} slots"))
    if lane.memory is not None and lane.memory.slots_fit is not None:
        bounds.append(("memory", lane.memory.slots_fit, lane.memory.statement))
    return bounds


def slo_range_high(slo: SloStanding, answer: int, k: Knee, caps: list[tuple[Reason, int, str]]) -> int | None:
    """The highest level above an SLO-bound `answer` that the SLO cannot rule out yet
    (docs/definitions.md#slo-range): measured, below the first level seen to miss, its p95s unbounded
    (`SloStanding.unbounded`), and allowed by every other limit and by the curve (a knee that stands,
    or the top of an undetermined range). None: none."""
    limits = [b[1] for b in caps if b[0] != "slo"]
    if k.knee is not None:
        limits.append(k.knee)
    elif k.undetermined is not None and k.range_high is not None:
        limits.append(k.range_high)
    open_ = [n for n, _ in slo.unbounded if n > answer and (slo.missed_at is None or n < slo.missed_at)
             and all(n <= x for x in limits)]
    return max(open_, default=None)


def _bounds(lane: LaneResult, levels: list[LevelResult], k: Knee, slo: SloStanding,
            caps: list[tuple[Reason, int, str]]) -> list[tuple[Reason, int, str]]:
    """`caps` and the curve's own limit (docs/definitions.md#binding-reason): the knee where it stands;
    "undetermined" at the level the curve is known to reach when it is undetermined and nothing else
    binds at or below that level; else the highest level measured (unless a failed server binds). The
    SLO binds where a level misses it or none is shown to meet it; where only levels above its bound
    are unbounded, it comes last, so that a tie names what the curve shows."""
    bounds = list(caps)
    if k.undetermined is not None:
        if not bounds or min(b[1] for b in bounds) > k.last_real_gain_to:
            bounds.append(("undetermined", k.last_real_gain_to, k.undetermined))
    elif k.knee is not None:
        bounds.append(("knee", k.knee, k.reason))
    elif server_failure_cap(lane)[0] is None:  # else the top level is the last below the failure: that binds
        bounds.append(("highest_measured", levels[-1].concurrency, k.reason))
    missed = lane.slo is not None and (slo.missed_at is not None or slo.bound is None)
    if not missed and slo.bound is not None and slo.bound < levels[-1].concurrency:
        bounds.append(("slo", slo.bound, slo.why))
    return bounds


def _level_note(rec: int | None, limit: int) -> str:
    """What the binding's detail adds of `rec`, the largest measured level at or below `limit`: what
    to measure when there is none, and that it lies below the limit when it does."""
    if rec is None:
        return (f"; no measured level is at or below {limit}: " +
                ("no concurrency is safe to advertise" if limit < 1
                 else f"measure N ≤ {limit} (e.g. --concurrency "
                      f"{','.join(str(n) for n in range(1, limit + 1))})"))
    return "" if rec == limit else (f"; the largest measured level at or below {limit} is {rec} "
                                    "(--refine measures between levels)")


def _expected_at(lv: LevelResult) -> Expected:
    """The expected figures of the recommended level `lv`: its throughput, p95 TTFT and TPOT with their
    CIs, and its peak memory."""
    ttft, ttft_ci = _p95(lv.latency.ttft_ms)
    tpot, tpot_ci = _p95(lv.latency.tpot_ms)
    return Expected(concurrency=lv.concurrency, output_tok_per_s=lv.throughput.output_tok_per_s,
                    p95_ttft_ms=ttft, p95_ttft_ci=ttft_ci, p95_tpot_ms=tpot, p95_tpot_ci=tpot_ci,
                    peak_rss_bytes=lv.memory.peak_rss_bytes, peak_gpu_mem_bytes=lv.memory.peak_gpu_mem_bytes)


def recommend_lane(lane: LaneResult, results: ResultsFile) -> LaneRecommendation | None:
    """The lane's recommendation by the module docstring's rules; None when no level has a throughput."""
    crash_cap, crashes = server_failure_cap(lane)
    measured_levels = sorted((lv for lv in lane.levels if lv.throughput.output_tok_per_s.value),
                             key=lambda lv: lv.concurrency)
    if not measured_levels:
        return None
    # the curve below a server failure; all of it when the server failed at the lowest level
    levels = ([lv for lv in measured_levels if crash_cap is None or lv.concurrency <= crash_cap]
              or measured_levels)
    points = points_of(levels)  # each of levels has a throughput
    ceiling = knee_ceiling(lane, results, levels, crash_cap)
    k = marginal_gain_knee(points, ceiling=ceiling)
    samples = [(lv.concurrency, r.output_tok_per_s) for lv in levels for r in lv.repetitions
               if r.output_tok_per_s is not None]
    slo = slo_standing(levels, lane.slo)
    slots = lane.runtime.total_slots
    cap, failures = fairness_cap(lane)
    err_cap, errs = error_cap(lane.levels)
    caps = _caps(lane, slo)
    cap_other = min((b[1] for b in caps), default=None)
    bounds = _bounds(lane, levels, k, slo, caps)
    limit = min(b[1] for b in bounds)
    tied = [b for b in bounds if b[1] == limit]
    reason = tied[0][0]
    detail = "; ".join(f"{b[0]}: {b[2]}" for b in tied)
    past = [lv for lv in levels if k.knee is not None and lv.concurrency > k.knee]
    saturation = saturated_by(lane, past[0]) if past else None
    resource: Resource | Literal["memory"] | None = None
    if reason == "knee" and saturation is not None:
        resource = saturation.resource
        detail += f"; {saturation.statement}"
    elif reason == "memory":
        resource = "memory"
    stopped = lane.plan[-1].reason if lane.plan and lane.plan[-1].action == "stop" else None
    rec = max((lv.concurrency for lv in levels if lv.concurrency <= limit), default=None)
    span = None
    if reason == "undetermined" and rec is not None and k.range_high is not None:
        high = min(k.range_high, cap_other) if cap_other is not None else k.range_high
        span = (rec, max(rec, high))
        named = [f"{b[0]}: {b[2]}" for b in caps if b[1] == high]  # the limits that set its top, if any
        detail = (f"between {span[0]} and {span[1]}, not settled (undetermined says why)" +
                  (f"; at most N={high}: " + "; ".join(named) if named else ""))
    if reason == "slo" and rec is not None and (unsure := slo_range_high(slo, rec, k, caps)) is not None:
        span = (rec, unsure)
        detail += (f"; between {rec} and {unsure}: N={unsure} is not seen to miss the SLO, but its p95s are "
                   "not bounded yet")
    if reason in ("highest_measured", "undetermined") and stopped:
        detail += f"; the adaptive sweep stopped: {stopped}"
    unverified_at, unverified = fairness_unverified(lane, rec) if rec is not None else (None, [])
    below = max((lv.concurrency for lv in levels if unverified_at and lv.concurrency < unverified_at),
                default=None)
    if rec is not None and below is not None:  # an unverified answer is the top of a range, not the answer
        span = (below, span[1] if span else rec)
        rec, reason, resource, limit = below, "fairness", None, below
        detail = (f"{'; '.join(unverified)}: fairness at or above {unverified_at} in flight is not verified, "
                  f"so the answer lies between {span[0]} and {span[1]}")
    detail += _level_note(rec, limit)
    expected = None if rec is None else _expected_at(next(lv for lv in levels if lv.concurrency == rec))
    return LaneRecommendation(
        lane=lane.lane, hardware_fingerprint=lane.hardware.fingerprint_sha256, hardware=lane.hardware,
        server_on_measuring_machine=lane.network.server_on_this_machine,
        model=lane.model, runtime=lane.runtime, workload=profile_of(lane.workload),
        recommended_concurrency=rec, recommended_range=span,
        max_concurrency_under_slo=slo.bound,
        slo=lane.slo, knee=k.knee, knee_reason=k.reason, curve_shape=k.shape, knee_ceiling=ceiling,
        kneedle_knee=kneedle(points), slots=slots,
        fairness_cap=cap, fairness_failures=failures, fairness_marginal=fairness_marginal(lane),
        fairness_unverified=unverified,
        server_failure_cap=crash_cap, server_failures=crashes,
        error_cap=err_cap, error_levels=errs, memory=lane.memory,
        memory_cap=lane.memory.slots_fit if lane.memory is not None else None,
        binding=Binding(reason=reason, resource=resource, detail=detail), saturation=saturation,
        expected=expected, usl=fit_usl(samples),
        server_confirmation=confirmation(levels, rec if rec is not None else levels[0].concurrency, slots),
        measured_levels=[LevelSummary(concurrency=lv.concurrency,
                                      output_tok_per_s=lv.throughput.output_tok_per_s,
                                      p95_ttft_ms=lv.latency.ttft_ms.p95, p95_tpot_ms=lv.latency.tpot_ms.p95,
                                      slo_attainment=lv.slo_attainment) for lv in levels],
        measured_at=results.finished_at or results.started_at, command_line=results.command_line,
        undetermined=k.undetermined if reason == "undetermined" else None,
        contended=any(lv.contended for lv in levels),
        contended_levels=[lv.concurrency for lv in levels if lv.contended],
        confidence=confidence(rec, points, cap_other, ceiling, span) if rec is not None else None,
        plan_stop=stopped, rate=max_rate(lane.rates, lane.slo),
    )


def recommend(run_dir: Path, results: ResultsFile | None = None) -> RecommendationsFile:
    """Recommendations from a run directory's results.json; `results`: that file's content, already in
    memory (a sweep that just derived it), so it is hashed but not parsed again."""
    path = run_dir / RESULTS_FILE
    if not path.exists():
        raise RunDirError(f"{run_dir} has no results.json; run 'satbench analyze {run_dir}' first")
    from satbench.analysis.results import MAX_RESULTS_BYTES
    from satbench.records.rundir import read_regular_file  # a regular file only: a named pipe never blocks

    text = read_regular_file(path, MAX_RESULTS_BYTES)
    results = results if results is not None else read_results(run_dir)
    lanes = [r for lane in results.lanes if (r := recommend_lane(lane, results)) is not None]
    if not lanes:
        raise RunDirError(f"{run_dir}: no lane has measured levels to recommend from")
    return RecommendationsFile(
        created_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        satbench_version=results.provenance.satbench_version,
        satbench_commit=results.provenance.satbench_commit,
        run_id=results.run_id, results_sha256=hashlib.sha256(text).hexdigest(), lanes=lanes,
    )


def recommendations_differ(run_dir: Path, text: str) -> str | None:
    """Why the recommendations `text` is not what this run directory gives now (None when it is),
    comparing everything but `created_at` and the `definitions` prose (numbers to within
    floating-point rounding: `close`); a file of an older minor schema version is compared in the
    fields it has (`only_keys_of`: those a later minor added are left out on both sides) and its
    `schema_version` is not compared."""
    try:
        given = RecommendationsFile.model_validate_json(text).model_dump(mode="json")
    except ValueError:
        return "not a valid recommendations file"
    fresh = recommend(run_dir).model_dump(mode="json")
    # `definitions` is prose restating the rules: another build may word it otherwise
    ignored: tuple[str, ...] = ("created_at", "definitions")
    if older_minor(given["schema_version"], fresh["schema_version"]):
        ignored += ("schema_version",)
        shape = json.loads(text)
        given, fresh = only_keys_of(given, shape), only_keys_of(fresh, shape)
    for d in (given, fresh):
        for key in ignored:
            d.pop(key)
    if close(given, fresh):  # numbers to within floating-point rounding (another Python or numpy)
        return None
    keys = sorted(k for k in fresh if not close(given.get(k), fresh[k]))
    return f"differs from a fresh recommendation from results.json (fields: {', '.join(keys)})"
