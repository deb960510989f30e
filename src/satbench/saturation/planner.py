"""The adaptive sweep's planner: a generator that is sent what each finished step measured and yields
the next step (GuideLLM's profile, here per repetition).

Rules, in the order `decide` applies them after each step:
1. A level just measured contended (metrics/contention.py) is measured again at once, up to
   `contended_retries` times. Each level gets at least `min_repetitions`, and more while its
   throughput 95 % CI half-width ÷ mean exceeds `ci_target`, up to `max_repetitions`; one whose p95
   estimate is over an SLO target needs no more, nor, once the climb is over, one whose throughput
   anywhere in its CI leaves the knee's answer as it is, at most one below a level seen to miss the
   SLO (knee.answer_holds_within_ci). These repetitions are interleaved: a level's second waits until
   the next level up has its first, and those beyond `min_repetitions` until the climb is over (or the
   budget leaves no room to climb); then rule 4's levels first, and the level with the fewest
   repetitions first. Each level's repetitions thus span the sweep, so a host that speeds up
   or slows down mid-sweep widens their CIs instead of making a step between levels. A level past the
   slot count gets one repetition of CONFIRM_REQUESTS_PER_STREAM per stream: it shows the server's
   queue, and the slots bind the answer below it. A level whose batch-means CI (`one_repetition_ci`)
   decides its steps to its neighbours stands on one repetition (knee.stands_alone).
2. A level seen to miss the lane's SLO (saturation/slo.py; docs/definitions.md#shown-to-meet-seen-to-miss)
   ends the climb: higher levels only wait longer.
3. Otherwise the climb goes on to the ceiling, whatever the curve did below it (a flat step may be a
   plateau that rises again): the level doubles up to the slot count, at most the lane's ceiling (a
   ceiling that is not a power of two is measured itself; the fairness checks, which run first, lower
   it below a level where one failed or the server fell over: `ceiling_why` says so), with one level
   past the slots for a server satbench did not size when it still gains there, to see its queue;
   after a server failure no level between is tried. Only then is the knee judged (saturation/knee.py),
   against that ceiling.
4. Where a measured level above the knee's candidate may still gain (P(gain) ≥ 5 %: knee.py,
   docs/definitions.md#undetermined), the candidate and each such level are measured more, the one
   with fewer repetitions first, up to `max_repetitions`; past that the answer is a range.
5. A knee that stands gets the levels between its bracketing points (saturation/refine.py, at most the
   slot count: above it requests only queue) measured next.
6. When the climb ends, with an SLO: the level the answer rests on (the highest measured at or below
   the knee or the upper end of a range, the slots, the ceiling and the first level seen to miss) gets
   one longer repetition (the samples missing ÷ N + SLO_RAMP_REQUESTS per stream) when its p95s
   cannot be bounded yet (59 samples in the window, docs/definitions.md#p95-upper-bound; at most
   SLO_MAX_REPETITIONS in all). If it then misses, the level below it is the one the answer rests on.
   A level that repetition cannot bound (a sample over a target already, and the bound from the
   samples it brings is their largest: slo.cannot_bound) is left unbounded and the level below it is
   bounded instead; where the curve allows it, the answer is then a range up to it
   (recommend.slo_range_high). Lower levels are not bounded: they cannot move the SLO bound unless
   seen to miss it, and a level shown to meet the SLO shows every level below it does (their p95s are
   taken not to exceed its), so bounding a range's upper end covers the whole range.
Before any step the time budget is checked: a step whose estimated length (the last repetition's,
scaled by (N'/N)^0.75 to a higher level, ^1 past the slots) would end past it is not taken.
Every decision carries its reason and figures; the sweep writes them to run.json, and a resume
replays them before planning on.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass

from satbench.config.schema import AdaptiveConfig, SloConfig
from satbench.metrics.level_result import LevelResult
from satbench.records.manifest import PlanAction, PlanDecision
from satbench.saturation import knee as curve
from satbench.saturation.knee import Knee, Point, answer_holds_within_ci, marginal_gain_knee, points_of
from satbench.saturation.refine import refine_between
from satbench.saturation.slo import (
    SloStanding,
    cannot_bound,
    estimate_misses,
    fewest_to_bound_p95,
    slo_standing,
)

MAX_DECISIONS = 500  # a lane's sweep never takes more steps than this (a guard, never reached by the rules)
SLO_MAX_REPETITIONS = 30  # repetitions a level may get to bound the p95 its SLO judges
SLO_RAMP_REQUESTS = 2  # per stream beyond the samples missing: its first and last fall outside the window
GROWTH_EXPONENT = 0.75  # a repetition's length grows ~(N'/N)^this up to the slots (E2E rises sub-linearly)
CONFIRM_REQUESTS_PER_STREAM = 2  # the level past the slots: enough to fill the queue, not to measure a curve


@dataclass(frozen=True)
class PlanContext:
    """What the planner knows of a lane besides its measurements."""

    lane: str
    adaptive: AdaptiveConfig
    ceiling: int  # the highest level the lane may run
    slots: int | None  # the server's slot count (/props), None when it does not say
    past_slots: bool  # one level past the slot count may be measured (a server satbench did not size)
    slo: SloConfig | None = None
    ceiling_why: str | None = None  # what set the ceiling below the lane's own, e.g. a failed fairness check


@dataclass(frozen=True)
class Feedback:
    """What the step just taken left: the lane's solo levels so far, its sweep time, how long the step
    took (s; None when it did not run), and the lowest level whose server failed (None: none)."""

    levels: list[LevelResult]
    elapsed_s: float
    last_step_s: float | None
    failed_at: int | None = None


def _step(action: PlanAction, level: int | None, rep: int | None, reason: str, fb: Feedback,
          requests: int | None = None) -> PlanDecision:
    return PlanDecision(action=action, level=level, repetition=rep, reason=reason,
                        elapsed_s=round(fb.elapsed_s, 3), requests=requests)


def _estimate_s(fb: Feedback, last: int | None, level: int, slots: int | None) -> float | None:
    """How long one repetition of `level` will take, from the last step at `last` (module docstring)."""
    if fb.last_step_s is None or last is None:
        return None
    if level <= last:
        return fb.last_step_s
    below = min(level, slots) if slots else level
    grow = (max(below, last) / last) ** GROWTH_EXPONENT * (level / below if below < level else 1.0)
    return fb.last_step_s * grow


@dataclass(frozen=True)
class _Tally:
    """The sweep so far, as `decide` reads it: `levels` the lane's solo levels by concurrency, `runs`
    each level's highest repetition number, `retries` its contended re-measurements, `top` the highest
    level allowed (the ceiling, below the lowest level whose server failed), `last` the level of the
    step just taken, `measured` the levels run at or below `top`, ascending."""

    ctx: PlanContext
    fb: Feedback
    levels: dict[int, LevelResult]
    runs: dict[int, int]
    retries: dict[int, int]
    top: int
    last: int | None
    measured: list[int]

    @classmethod
    def of(cls, ctx: PlanContext, fb: Feedback, done: Sequence[PlanDecision]) -> _Tally:
        """The tally of `done` (at least one decision) and `fb`."""
        runs: dict[int, int] = {}
        retries: dict[int, int] = {}
        for d in done:
            if d.level is not None and d.repetition is not None:
                runs[d.level] = max(runs.get(d.level, 0), d.repetition)
                retries[d.level] = retries.get(d.level, 0) + (d.action == "remeasure")
        top = ctx.ceiling if fb.failed_at is None else min(ctx.ceiling, fb.failed_at - 1)
        return cls(ctx, fb, {lv.concurrency: lv for lv in fb.levels}, runs, retries, top, done[-1].level,
                   sorted(n for n in runs if n <= top))

    def go(self, action: PlanAction, level: int, why: str, requests: int | None = None) -> PlanDecision:
        """`action` at `level`'s next repetition (`requests`: its request count, when not N ×
        requests_per_stream), or "stop" when its estimated length would end past the time budget."""
        a, fb = self.ctx.adaptive, self.fb
        rep = self.runs.get(level, 0) + 1
        est = _estimate_s(fb, self.last, level, self.ctx.slots)
        if est is not None and requests is not None:
            est *= requests / (level * a.requests_per_stream)
        if a.budget_s is not None and est is not None and fb.elapsed_s + est > a.budget_s:
            return _step("stop", None, None, f"time budget {a.budget_s:g} s: {fb.elapsed_s:.0f} s spent, "
                         f"the next step ({action} N={level}, repetition {rep}: {why}) would take "
                         f"~{est:.0f} s", fb)
        return _step(action, level, rep, why, fb, requests)


@dataclass(frozen=True)
class _Judged:
    """The curve after the step: `ceiling` the level its knee is judged against (the slots, at most
    `top`; after a server failure at most the highest level measured), `points` and `knee` (knee.py),
    `standing` the SLO's (slo.py), `nxt` the climb's next step (None: the climb is over, or a level
    missed the SLO: rules 2 and 3) and `below_miss` one below the first level seen to miss the SLO."""

    ceiling: int
    points: list[Point]
    knee: Knee
    standing: SloStanding
    nxt: tuple[PlanAction, int, str, int | None] | None
    below_miss: int | None

    @classmethod
    def of(cls, t: _Tally, known: list[LevelResult]) -> _Judged:
        """The judgement of the `known` levels (those of `t.measured` that have a result; not empty)."""
        ceiling = min(t.top, t.ctx.slots) if t.ctx.slots else t.top
        if t.fb.failed_at is not None:  # the highest level the server was seen to hold: none between is tried
            ceiling = min(ceiling, t.measured[-1])
        points = points_of(known)
        knee = marginal_gain_knee(points, ceiling=ceiling)
        standing = slo_standing(known, t.ctx.slo)
        if standing.missed_at is not None:  # rule 2: a level seen to miss the SLO ends the climb
            return cls(ceiling, points, knee, standing, None, standing.missed_at - 1)
        return cls(ceiling, points, knee, standing, _next_level(t.ctx, t.measured[-1], t.top, ceiling, knee),
                   None)


def decide(ctx: PlanContext, fb: Feedback, done: Sequence[PlanDecision]) -> PlanDecision:
    """The next decision after `done` (rules in the module docstring). In this order: the first step;
    a stop after MAX_DECISIONS; a contended level measured again; a stop when nothing is measured; the
    interleaved repetitions of rule 1; the climb's next level; then what ends the sweep
    (`_after_climb`). Every step but a stop first passes the time budget (`_Tally.go`)."""
    if not done:
        why = f" (ceiling N={ctx.ceiling}: {ctx.ceiling_why})" if ctx.ceiling_why else ""
        return _step("measure", 1, 1, f"the adaptive sweep starts at N=1{why}", fb)
    if len(done) >= MAX_DECISIONS:
        return _step("stop", None, None, f"{MAX_DECISIONS} steps taken", fb)
    t = _Tally.of(ctx, fb, done)
    if (again := _contended(t)) is not None:
        return again
    known = [t.levels[n] for n in t.measured if n in t.levels]
    if not known:
        return _step("stop", None, None, "no level below the failed one left to measure" if fb.failed_at
                     else "nothing measured", fb)
    j = _Judged.of(t, known)
    climb = t.go(*j.nxt) if j.nxt is not None else None
    if (repeat := _interleaved(t, j, climbing=climb is not None and climb.action != "stop")) is not None:
        return repeat
    return climb if climb is not None else _after_climb(t, j, done)


def _contended(t: _Tally) -> PlanDecision | None:
    """Rule 1: the level just measured, when it ran contended and has `contended_retries` left, is
    measured again at once; None otherwise."""
    last, a = t.last, t.ctx.adaptive
    if last is None or last > t.top or (lv := t.levels.get(last)) is None or lv.contended is None:
        return None
    retried = t.retries.get(last, 0)
    if retried >= a.contended_retries:
        return None
    return t.go("remeasure", last, f"N={last} ran contended ({lv.contended}); measured again "
                                   f"({retried + 1} of {a.contended_retries})")


def _wants(t: _Tally, j: _Judged, n: int) -> str | None:
    """Rule 1: why level n needs another repetition; None when it needs no more (a level past the
    slots gets one: it shows the queue, and the slots bind below it)."""
    a, lv = t.ctx.adaptive, t.levels.get(n)
    if lv is None or (t.ctx.slots and n > t.ctx.slots):
        return None
    reps = t.runs[n] - t.retries.get(n, 0)  # the repetitions the CI rule ran (not the re-measured ones)
    missed = t.ctx.slo is not None and bool(estimate_misses(lv, t.ctx.slo)) and reps >= a.min_repetitions
    if reps >= a.max_repetitions or missed:
        return None
    if _below_minimum(t, j, n):
        return f"N={n}: {len(lv.repetitions)} clean repetition(s), at least {a.min_repetitions}"
    frac = curve.ci_fraction(lv)
    if frac is None:
        return f"N={n}: no CI after {reps} repetitions"
    settled = j.nxt is None and answer_holds_within_ci(j.points, n, j.ceiling, j.below_miss)
    if frac > a.ci_target and not settled:
        return f"N={n}: throughput CI ±{frac:.1%} > ±{a.ci_target:.0%} after {reps} repetitions"
    return None


def _below_minimum(t: _Tally, j: _Judged, n: int) -> bool:
    """Level n has fewer than `min_repetitions` clean repetitions and does not stand on one: the lane
    gives a level measured once a CI from its batch means, and that CI decides its steps (rule 1)."""
    a = t.ctx.adaptive
    return len(t.levels[n].repetitions) < a.min_repetitions and not (
        a.one_repetition_ci == "batch_means" and curve.stands_alone(j.points, n, j.ceiling))


def _interleaved(t: _Tally, j: _Judged, climbing: bool) -> PlanDecision | None:
    """Rule 1, interleaved: the next repetition a level wants (`_wants`), None when none is due. While
    `climbing` (the climb's next step passes the budget), only a level below `min_repetitions` with a
    level above it already run is due; else every level that wants one, rule 4's first (narrowing
    them may settle the others), then the fewest-measured (then the lowest) first."""
    least = t.ctx.adaptive.min_repetitions
    pending = [(n, need) for n in t.measured if (need := _wants(t, j, n)) is not None]
    ready = [(n, need) for n, need in pending if not climbing or (
        any(m > n for m in t.runs) and _below_minimum(t, j, n))]
    if not ready:
        return None
    unsure = set() if climbing else set(_unsure(t, j))
    n, need = min(ready, key=lambda p: (p[0] not in unsure and not _below_minimum(t, j, p[0]),
                                        len(t.levels[p[0]].repetitions), p[0]))
    later = [m for m in t.runs if m > n]
    if n in unsure:
        return t.go("repeat", n, need + f" ({j.knee.undetermined}: the range's levels first)")
    if len(t.levels[n].repetitions) >= least:
        return t.go("repeat", n, need + " (interleaved: the fewest-measured level first)")
    return t.go("repeat", n, need + (f" (after N={min(later)}'s first: interleaved)" if later else ""))


def _after_climb(t: _Tally, j: _Judged, done: Sequence[PlanDecision]) -> PlanDecision:
    """The climb is over: rule 4 (levels above the candidate that may still gain are resolved, those
    at or below the level the SLO allows), then the stop for a level that missed the SLO, rule 5 (a
    knee's refinement), and the stop at the highest level the climb could reach; each stop by rule 6
    (`_settle`)."""
    a, knee = t.ctx.adaptive, j.knee
    if unsure := _unsure(t, j):
        more = sorted((n for n in unsure if t.runs.get(n, 0) < a.max_repetitions),
                      key=lambda n: (len(t.levels[n].repetitions), n))
        if more:
            return t.go("resolve", more[0], f"{knee.undetermined}: N={more[0]} measured again")
        return _settle(t, j, f"{knee.undetermined}; every level of it has {a.max_repetitions} repetitions")
    if j.standing.missed_at is not None:
        return _settle(t, j, f"SLO: {j.standing.why}; higher levels only wait longer")
    if knee.knee is not None:
        return _refine(t, j, done)
    return _settle(t, j, _climb_end(t, j))


def _unsure(t: _Tally, j: _Judged) -> list[int]:
    """Rule 4's levels: the candidate and those above it that may still gain, at most the level the SLO
    allows; empty unless the knee is undetermined across two or more."""
    allowed = t.top if j.below_miss is None else j.below_miss
    unsure = [n for n in j.knee.unresolved if n <= allowed]
    return unsure if j.knee.undetermined is not None and len(unsure) >= 2 else []


def _refine(t: _Tally, j: _Judged, done: Sequence[PlanDecision]) -> PlanDecision:
    """Rule 5: the first level between the knee's bracketing levels not run yet (refine.py, at most
    `top` and the slots); once none is left, the stop by rule 6."""
    slots, knee = t.ctx.slots, j.knee
    climbed = [t.levels[d.level] for d in done if d.action in ("measure", "confirm") and d.level in t.levels]
    wanted = [m for m in refine_between(climbed) if m <= t.top and (not slots or m <= slots)]
    todo = [m for m in wanted if m not in t.runs]
    if todo:
        return t.go("refine", todo[0], f"knee at N={knee.knee}, judged against the ceiling N={j.ceiling}: "
                                       f"refine {', '.join(map(str, wanted))} between its bracketing levels")
    return _settle(t, j, f"knee at N={knee.knee}: {knee.reason}" +
                   (f"; refined at {', '.join(map(str, wanted))}" if wanted else ""))


def _climb_end(t: _Tally, j: _Judged) -> str:
    """Why a climb that found no knee and no SLO miss ended: the server failed, the slots are reached,
    or the ceiling is."""
    ctx, high, reason = t.ctx, t.measured[-1], j.knee.reason
    if t.fb.failed_at is not None and t.top < ctx.ceiling:
        return f"the server failed at N={t.fb.failed_at}; {reason}"
    if ctx.slots and high >= ctx.slots:
        return (f"N={high} reaches the server's {ctx.slots} slots; {reason}" +
                ("" if ctx.past_slots else " (the slots satbench started it with; raise --parallel "
                                           "to look higher)"))
    why = f": {ctx.ceiling_why}" if ctx.ceiling_why else ""
    return f"N={high} is the highest level allowed (ceiling {ctx.ceiling}{why}); {reason}"


def _settle(t: _Tally, j: _Judged, why: str) -> PlanDecision:
    """Rule 6: the climb is over for `why`; bound the level the answer rests on (the highest measured
    at or below the knee or the range's top, the slots, `top` and one below a miss), or the next one
    down where repetition cannot bound it; then stop."""
    ctx, knee = t.ctx, j.knee
    answer = knee.knee if knee.knee is not None else knee.range_high if knee.undetermined else None
    caps = [c for c in (answer, ctx.slots, t.top, j.below_miss) if c is not None]
    unbounded = dict(j.standing.unbounded)  # level → the fewest samples of its judged p95s
    skipped: list[str] = []  # the levels left unbounded, and why
    for rests in sorted((n for n in t.measured if n in t.levels and n <= min(caps)), reverse=True):
        if ctx.slo is None or (short := unbounded.get(rests)) is None:
            break  # bounded already: the answer rests on it
        if t.runs[rests] >= SLO_MAX_REPETITIONS:
            return _step("stop", None, None, f"{why}; N={rests}'s p95 is still not bounded after "
                         f"{t.runs[rests]} repetitions" + _skipped(skipped), t.fb)
        per_stream = -(-(fewest_to_bound_p95() - short) // rests) + SLO_RAMP_REQUESTS
        after = short + rests * (per_stream - SLO_RAMP_REQUESTS)
        if futile := cannot_bound(t.levels[rests], ctx.slo, after):
            skipped.append(f"N={rests} is left unbounded: {'; '.join(futile)}, and the bound from "
                           f"{after} samples is their largest")
            continue
        return t.go("repeat", rests, f"N={rests}, the level the answer rests on ({why}"
                                     f"{_skipped(skipped)}): the SLO's p95 needs "
                                     f"{fewest_to_bound_p95()} requests in the window to bound it, "
                                     f"{short} so far: one repetition of {rests} × {per_stream}",
                    requests=rests * per_stream)
    return _step("stop", None, None, why + _skipped(skipped), t.fb)


def _skipped(skipped: list[str]) -> str:
    return "".join(f"; {s}" for s in skipped)


def _next_level(ctx: PlanContext, high: int, top: int, ceiling: int,
                knee: Knee) -> tuple[PlanAction, int, str, int | None] | None:
    """Rule 4: the next level of the climb, or None when it is over. The level doubles up to the
    ceiling (the slot count, at most the lane's ceiling; a level that is not a power of two is measured
    itself), whatever the curve did below it: a flat step may be a plateau that rises again. At the
    slot count of a server satbench did not size, a curve still gaining there gets one level past it,
    to see whether the server queues. After a server failure no level between is tried."""
    if ctx.slots and high >= ctx.slots:
        if ctx.past_slots and high == ctx.slots and 2 * high <= top and knee.last_real_gain_to == high:
            per = min(CONFIRM_REQUESTS_PER_STREAM, ctx.adaptive.requests_per_stream)
            return ("confirm", 2 * high, f"N={high} is the server's slot count and still gains: "
                                         f"N={2 * high} shows whether the server queues beyond it "
                                         f"({per} requests per stream: the slots bind the answer below it)",
                    2 * high * per)
        return None
    if high >= ceiling or (top < ctx.ceiling and 2 * high > top):
        return None
    n = min(2 * high, ceiling)
    return ("measure", n, f"climbing to the ceiling N={ceiling} ({knee.shape or 'one level so far'}): "
                          f"{knee.reason}", None)


def plan_lane(ctx: PlanContext,
              recorded: Sequence[PlanDecision] = ()) -> Generator[PlanDecision, Feedback, None]:
    """Yields the lane's steps, each sent the Feedback of the one before; ends after a "stop". The
    `recorded` decisions of an earlier session come first, as they were (a resume replays them)."""
    done: list[PlanDecision] = []
    fb = Feedback(levels=[], elapsed_s=0.0, last_step_s=None)
    while True:
        d = recorded[len(done)] if len(done) < len(recorded) else decide(ctx, fb, done)
        done.append(d)
        fb = yield d
        if d.action == "stop":
            return
