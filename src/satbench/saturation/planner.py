"""The adaptive sweep's planner: a generator that is sent what each finished step measured and yields
the next step (GuideLLM's profile, here per repetition).

Rules, in the order `decide` applies them after each step:
1. A level just measured contended (metrics/contention.py) is measured again at once, up to
   `contended_retries` times. Each level gets at least `min_repetitions`, and more while its
   throughput 95 % CI half-width ÷ mean exceeds `ci_target`, up to `max_repetitions`; one whose p95
   estimate is over an SLO target needs no more, nor, once the climb is over, one whose throughput
   anywhere in its CI leaves the knee's answer as it is, at most one below a level seen to miss the
   SLO (`answer_holds_within_ci`). These repetitions
   are interleaved: a level's second waits until the next level up has its first, and those beyond
   `min_repetitions` until the climb is over (or the budget leaves no room to climb); then the level
   with the fewest goes first. Each level's repetitions thus span the sweep, so a host that speeds up
   or slows down mid-sweep widens their CIs instead of making a step between levels. A level past the
   slot count gets one repetition: it shows the server's queue, and the slots bind the answer below it.
2. A level seen to miss the lane's SLO (saturation/slo.py) ends the climb: higher levels only wait
   longer.
3. Otherwise the climb goes on to the ceiling, whatever the curve did below it (a flat step may be a
   plateau that rises again): the level doubles up to the slot count, at most the lane's ceiling (a
   ceiling that is not a power of two is measured itself; the fairness checks, which run first, lower
   it below a level where one failed or the server fell over: `ceiling_why` says so), with one level
   past the slots for a server satbench did not size when it still gains there, to see its queue;
   after a server failure no level between is tried. Only then is the knee judged (saturation/knee.py),
   against that ceiling.
4. Where a measured level above the knee's candidate may still gain (P(gain) ≥ 5 %: knee.py,
   undetermined), the candidate and each such level are measured more, the one with fewer repetitions
   first, up to `max_repetitions`; past that the answer is a range.
5. A knee that stands gets the levels between its bracketing points (saturation/refine.py, at most the
   slot count: above it requests only queue) measured next.
6. When the climb ends, with an SLO: the level the answer rests on (the highest measured at or below
   the knee or the upper end of a range, the slots, the ceiling and the first level seen to miss) gets
   one longer repetition (the samples missing ÷ N + SLO_RAMP_REQUESTS per stream) when its p95s
   cannot be bounded yet (59 samples in the window; at most SLO_MAX_REPETITIONS in all). If it then
   misses, the level below it is the one the answer rests on. A level that repetition cannot bound
   (a sample over a target already, and the bound from the samples it brings is their largest:
   slo.cannot_bound) is left unbounded and the level below it is bounded instead; where the curve
   allows it, the answer is then a range up to it (recommend.slo_range_high). Lower levels are not
   bounded: they cannot move the SLO bound unless they are seen to miss it, and a level shown to meet the SLO
   shows every level below it does (their p95s are taken not to exceed its), so bounding a range's
   upper end covers the whole range, however the repetitions then settle it.
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
from satbench.saturation.knee import Knee, Point, marginal_gain_knee, points_of
from satbench.saturation.refine import refine_between
from satbench.saturation.slo import cannot_bound, estimate_misses, fewest_to_bound_p95, slo_standing

MAX_DECISIONS = 500  # a lane's sweep never takes more steps than this (a guard, never reached by the rules)
SLO_MAX_REPETITIONS = 30  # repetitions a level may get to bound the p95 its SLO judges
SLO_RAMP_REQUESTS = 2  # per stream beyond the samples missing: its first and last fall outside the window
GROWTH_EXPONENT = 0.75  # a repetition's length grows ~(N'/N)^this up to the slots (E2E rises sub-linearly)


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


def _ci_fraction(lv: LevelResult) -> float | None:
    """Throughput 95 % CI half-width ÷ mean; None without a CI."""
    est = lv.throughput.output_tok_per_s
    if est.value is None or not est.value or est.ci_high is None:
        return None
    return (est.ci_high - est.value) / est.value


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


def _shifted(points: Sequence[Point], n: int, to: float) -> list[Point]:
    """`points` with level n's mean moved to `to`: its repetitions and CI ends moved alike."""
    def move(p: Point) -> Point:
        d = to - p.x
        return p.model_copy(update={"x": to, "reps": [r + d for r in p.reps],
                                    "ci_low": None if p.ci_low is None else p.ci_low + d,
                                    "ci_high": None if p.ci_high is None else p.ci_high + d})
    return [move(p) if p.n == n else p for p in points]


def answer_holds_within_ci(points: Sequence[Point], n: int, ceiling: int, cap: int | None = None) -> bool:
    """Whether the knee's answer (knee, candidate, range) stays the same with level n's throughput
    at either end of its 95 % CI: then more precision at n cannot move it. With `cap` (one below the
    first level seen to miss the SLO), the answer compared is the recommendation and the range's top,
    each at most `cap`: the SLO binds wherever the curve puts them above it."""
    def answer(pts: Sequence[Point]) -> tuple[int | None, ...]:
        k = marginal_gain_knee(pts, ceiling=ceiling)
        if cap is None:
            return k.knee, k.last_real_gain_to, k.range_high
        low = k.knee if k.knee is not None else k.last_real_gain_to
        high = k.knee if k.knee is not None else k.range_high if k.range_high is not None else low
        return min(low, cap), min(high, cap)
    p = next((q for q in points if q.n == n), None)
    if p is None or p.ci_low is None or p.ci_high is None:
        return False
    now = answer(points)
    return all(answer(_shifted(points, n, end)) == now for end in (p.ci_low, p.ci_high))


def decide(ctx: PlanContext, fb: Feedback, done: Sequence[PlanDecision]) -> PlanDecision:
    """The next decision after `done` (rules in the module docstring)."""
    a = ctx.adaptive
    if not done:
        why = f" (ceiling N={ctx.ceiling}: {ctx.ceiling_why})" if ctx.ceiling_why else ""
        return _step("measure", 1, 1, f"the adaptive sweep starts at N=1{why}", fb)
    if len(done) >= MAX_DECISIONS:
        return _step("stop", None, None, f"{MAX_DECISIONS} steps taken", fb)
    levels = {lv.concurrency: lv for lv in fb.levels}
    runs: dict[int, int] = {}
    retries: dict[int, int] = {}
    for d in done:
        if d.level is not None and d.repetition is not None:
            runs[d.level] = max(runs.get(d.level, 0), d.repetition)
            retries[d.level] = retries.get(d.level, 0) + (d.action == "remeasure")
    top = ctx.ceiling if fb.failed_at is None else min(ctx.ceiling, fb.failed_at - 1)
    last = done[-1].level
    measured = sorted(n for n in runs if n <= top)

    def go(action: PlanAction, level: int, why: str, requests: int | None = None) -> PlanDecision:
        rep = runs.get(level, 0) + 1
        est = _estimate_s(fb, last, level, ctx.slots)
        if est is not None and requests is not None:
            est *= requests / (level * a.requests_per_stream)
        if a.budget_s is not None and est is not None and fb.elapsed_s + est > a.budget_s:
            return _step("stop", None, None, f"time budget {a.budget_s:g} s: {fb.elapsed_s:.0f} s spent, "
                         f"the next step ({action} N={level}, repetition {rep}: {why}) would take "
                         f"~{est:.0f} s", fb)
        return _step(action, level, rep, why, fb, requests)

    if last is not None and last <= top and (lv := levels.get(last)) is not None and (
            lv.contended is not None and retries.get(last, 0) < a.contended_retries):
        return go("remeasure", last, f"N={last} ran contended ({lv.contended}); measured again "
                                     f"({retries.get(last, 0) + 1} of {a.contended_retries})")
    known = [levels[n] for n in measured if n in levels]
    if not known:
        return _step("stop", None, None, "no level below the failed one left to measure" if fb.failed_at
                     else "nothing measured", fb)
    ceiling = min(top, ctx.slots) if ctx.slots else top
    if fb.failed_at is not None:  # the highest level the server was seen to hold: none between is tried
        ceiling = min(ceiling, measured[-1])
    points = points_of(known)
    knee = marginal_gain_knee(points, ceiling=ceiling)
    standing = slo_standing(known, ctx.slo)
    # rule 3: a level seen to miss the SLO ends the climb; else rule 4: climb to the ceiling
    nxt = None if standing.missed_at is not None else _next_level(ctx, measured[-1], top, ceiling, knee)
    below_miss = None if standing.missed_at is None else standing.missed_at - 1

    def wants(n: int) -> str | None:
        """Rule 1: why level n needs another repetition; None when it needs no more (a level past the
        slots gets one: it shows the queue, and the slots bind below it)."""
        lv = levels.get(n)
        if lv is None or (ctx.slots and n > ctx.slots):
            return None
        reps = runs[n] - retries.get(n, 0)  # the repetitions the CI rule ran (not the re-measured ones)
        missed = ctx.slo is not None and bool(estimate_misses(lv, ctx.slo)) and reps >= a.min_repetitions
        if reps >= a.max_repetitions or missed:
            return None
        if len(lv.repetitions) < a.min_repetitions:
            return f"N={n}: {len(lv.repetitions)} clean repetition(s), at least {a.min_repetitions}"
        frac = _ci_fraction(lv)
        if frac is None:
            return f"N={n}: no CI after {reps} repetitions"
        settled = nxt is None and answer_holds_within_ci(points, n, ceiling, below_miss)
        if frac > a.ci_target and not settled:
            return f"N={n}: throughput CI ±{frac:.1%} > ±{a.ci_target:.0%} after {reps} repetitions"
        return None

    # rule 1, interleaved: a level's second repetition waits for the next level's first, and those the
    # CI asks for beyond `min_repetitions` for the end of the climb (or a budget with no room left to
    # climb); then the fewest-measured level first, so that each level's repetitions span the sweep
    climb = go(*nxt) if nxt is not None else None
    climbing = climb is not None and climb.action != "stop"
    pending = [(n, need) for n in measured if (need := wants(n)) is not None]
    ready = [(n, need) for n, need in pending if not climbing or (
        any(m > n for m in runs) and len(levels[n].repetitions) < a.min_repetitions)]
    if ready:
        n, need = min(ready, key=lambda p: (len(levels[p[0]].repetitions), p[0]))
        later = [m for m in runs if m > n]
        if len(levels[n].repetitions) >= a.min_repetitions:
            return go("repeat", n, need + " (interleaved: the fewest-measured level first)")
        return go("repeat", n, need + (f" (after N={min(later)}'s first: interleaved)" if later else ""))

    def settle(why: str) -> PlanDecision:
        """Rule 6: the climb is over for `why`; bound the level the answer rests on, then stop."""
        answer = knee.knee if knee.knee is not None else knee.range_high if knee.undetermined else None
        caps = [c for c in (answer, ctx.slots, top, below_miss) if c is not None]
        unbounded = dict(standing.unbounded)  # level → the fewest samples of its judged p95s
        skipped: list[str] = []  # the levels left unbounded, and why
        for rests in sorted((n for n in measured if n in levels and n <= min(caps)), reverse=True):
            if ctx.slo is None or (short := unbounded.get(rests)) is None:
                break  # bounded already: the answer rests on it
            if runs[rests] >= SLO_MAX_REPETITIONS:
                return _step("stop", None, None, f"{why}; N={rests}'s p95 is still not bounded after "
                             f"{runs[rests]} repetitions" + _skipped(skipped), fb)
            per_stream = -(-(fewest_to_bound_p95() - short) // rests) + SLO_RAMP_REQUESTS
            after = short + rests * (per_stream - SLO_RAMP_REQUESTS)
            if futile := cannot_bound(levels[rests], ctx.slo, after):
                skipped.append(f"N={rests} is left unbounded: {'; '.join(futile)}, and the bound from "
                               f"{after} samples is their largest")
                continue
            return go("repeat", rests, f"N={rests}, the level the answer rests on ({why}"
                                       f"{_skipped(skipped)}): the SLO's p95 needs "
                                       f"{fewest_to_bound_p95()} requests in the window to bound it, "
                                       f"{short} so far: one repetition of {rests} × {per_stream}",
                      requests=rests * per_stream)
        return _step("stop", None, None, why + _skipped(skipped), fb)

    if climb is not None:
        return climb
    # rule 5: the profile is measured; where a level above the candidate may still gain, repetitions
    # decide (those at or below the level the SLO allows)
    allowed = top if standing.missed_at is None else standing.missed_at - 1
    unsure = [n for n in knee.unresolved if n <= allowed]
    if knee.undetermined is not None and len(unsure) >= 2:
        more = sorted((n for n in unsure if runs.get(n, 0) < a.max_repetitions),
                      key=lambda n: (len(levels[n].repetitions), n))
        if more:
            return go("resolve", more[0], f"{knee.undetermined}: N={more[0]} measured again")
        return settle(f"{knee.undetermined}; every level of it has {a.max_repetitions} repetitions")
    if standing.missed_at is not None:
        return settle(f"SLO: {standing.why}; higher levels only wait longer")
    if knee.knee is not None:
        climbed = [levels[d.level] for d in done if d.action in ("measure", "confirm") and d.level in levels]
        wanted = [m for m in refine_between(climbed) if m <= top and (not ctx.slots or m <= ctx.slots)]
        todo = [m for m in wanted if m not in runs]
        if todo:
            return go("refine", todo[0], f"knee at N={knee.knee}, judged against the ceiling N={ceiling}: "
                                         f"refine {', '.join(map(str, wanted))} between its bracketing "
                                         "levels")
        return settle(f"knee at N={knee.knee}: {knee.reason}" +
                      (f"; refined at {', '.join(map(str, wanted))}" if wanted else ""))
    high = measured[-1]
    if fb.failed_at is not None and top < ctx.ceiling:
        return settle(f"the server failed at N={fb.failed_at}; {knee.reason}")
    if ctx.slots and high >= ctx.slots:
        return settle(f"N={high} reaches the server's {ctx.slots} slots; {knee.reason}" +
                      ("" if ctx.past_slots else " (the slots satbench started it with; raise --parallel "
                                                 "to look higher)"))
    why = f": {ctx.ceiling_why}" if ctx.ceiling_why else ""
    return settle(f"N={high} is the highest level allowed (ceiling {ctx.ceiling}{why}); {knee.reason}")


def _skipped(skipped: list[str]) -> str:
    return "".join(f"; {s}" for s in skipped)


def _next_level(ctx: PlanContext, high: int, top: int, ceiling: int,
                knee: Knee) -> tuple[PlanAction, int, str] | None:
    """Rule 4: the next level of the climb, or None when it is over. The level doubles up to the
    ceiling (the slot count, at most the lane's ceiling; a level that is not a power of two is measured
    itself), whatever the curve did below it: a flat step may be a plateau that rises again. At the
    slot count of a server satbench did not size, a curve still gaining there gets one level past it,
    to see whether the server queues. After a server failure no level between is tried."""
    if ctx.slots and high >= ctx.slots:
        if ctx.past_slots and high == ctx.slots and 2 * high <= top and knee.last_real_gain_to == high:
            return ("confirm", 2 * high, f"N={high} is the server's slot count and still gains: "
                                         f"N={2 * high} shows whether the server queues beyond it")
        return None
    if high >= ceiling or (top < ctx.ceiling and 2 * high > top):
        return None
    n = min(2 * high, ceiling)
    return ("measure", n, f"climbing to the ceiling N={ceiling} ({knee.shape or 'one level so far'}): "
                          f"{knee.reason}")


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
