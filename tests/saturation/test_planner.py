"""The adaptive sweep's planner (saturation/planner.py), driven by hand-made lane results."""

from __future__ import annotations

import itertools

import pytest

from satbench.config.schema import AdaptiveConfig, SloConfig
from satbench.saturation.planner import Feedback, PlanContext, decide, plan_lane
from tests.builders import replaced
from tests.saturation.planner_fixtures import lane_result


def ctx(**kw) -> PlanContext:
    base = dict(lane="default", adaptive=AdaptiveConfig(), ceiling=8, slots=4, past_slots=True)
    return PlanContext(**{**base, **kw})


def run(planner_ctx: PlanContext, curve: dict[int, list[float]], step_s: float = 1.0,
        contended: dict[int, int] | None = None, limit: int = 60, once_ci: float | None = None) -> list:
    """Drive plan_lane: each measured repetition of level n yields curve[n][rep - 1] tok/s (the last
    value repeating); `contended[n]` repetitions of n are contended first; a level measured once has
    a CI of ± `once_ci` (None: none)."""
    got: dict[int, list[float]] = {}
    contended = dict(contended or {})
    gen = plan_lane(planner_ctx)
    d = next(gen)
    out = [d]
    elapsed = 0.0
    while d.action != "stop" and len(out) < limit:
        n = d.level
        if contended.get(n):
            contended[n] -= 1
            bad = True
        else:
            vals = curve[n]
            got.setdefault(n, []).append(vals[min(len(got.get(n, [])), len(vals) - 1)])
            bad = False
        elapsed += step_s
        contended_now = {n} if bad and not got.get(n) else set()
        d = gen.send(Feedback(lane_result(got, contended_levels=contended_now, once_ci=once_ci).levels,
                              elapsed, step_s))
        out.append(d)
    return out


def test_doubles_from_1_confirms_past_the_slots_once_and_answers_the_slots():
    steps = run(ctx(), {1: [100, 100.2], 2: [200, 200.4], 4: [390, 390.6], 8: [392, 392.5]})
    # one repetition past the slots: it shows the queue, and the 4 slots bind the answer below it; each
    # level's second repetition follows the next level's first
    assert [(d.action, d.level) for d in steps] == [
        ("measure", 1), ("measure", 2), ("repeat", 1), ("measure", 4), ("repeat", 2), ("confirm", 8),
        ("repeat", 4), ("stop", None)]
    assert "N=8 reaches the server's 4 slots" in steps[-1].reason
    assert "up to the highest level N=4 (the ceiling N=4)" in steps[-1].reason


BATCH_MEANS = AdaptiveConfig(one_repetition_ci="batch_means")


def test_a_level_whose_one_repetition_decides_its_steps_is_not_repeated():
    # ±10 % from one repetition: 1 → 2 → 4 each doubles, far past the 10 % a gain needs, so no level
    # needs a second; the confirm past the slots runs 2 requests per stream
    steps = run(ctx(adaptive=BATCH_MEANS), {1: [100], 2: [200], 4: [390], 8: [392]}, once_ci=0.10)
    assert [(d.action, d.level, d.requests) for d in steps] == [
        ("measure", 1, None), ("measure", 2, None), ("measure", 4, None), ("confirm", 8, 16),
        ("stop", None, None)]
    assert "2 requests per stream" in steps[3].reason


def test_a_step_one_repetition_cannot_decide_gets_the_second_repetition():
    # 1 → 2 gains 8 %: within ±10 % from one repetition each, neither rising nor flat is shown
    steps = run(ctx(adaptive=BATCH_MEANS), {1: [100, 100.2], 2: [108, 108.1], 4: [300], 8: [301]},
                once_ci=0.10)
    assert ("repeat", 1) in [(d.action, d.level) for d in steps]
    assert ("repeat", 2) in [(d.action, d.level) for d in steps]
    assert ("repeat", 4) not in [(d.action, d.level) for d in steps]


def test_without_batch_means_one_repetition_never_stands_alone():
    steps = run(ctx(), {1: [100, 100.2], 2: [200, 200.4], 4: [390, 390.6], 8: [392]}, once_ci=0.10)
    assert [(d.action, d.level) for d in steps if d.action == "repeat"] == [("repeat", 1), ("repeat", 2),
                                                                           ("repeat", 4)]


def test_a_server_satbench_sized_stops_at_its_slots():
    steps = run(ctx(past_slots=False, slots=8), {1: [100], 2: [200], 4: [400], 8: [790]})
    assert steps[-1].action == "stop" and "8 slots" in steps[-1].reason and "--parallel" in steps[-1].reason
    assert max(d.level or 0 for d in steps) == 8


def test_a_wide_ci_gets_more_repetitions_up_to_the_maximum():
    # whether N=2 gains over N=1 depends on where in its wide CI N=1 lies
    steps = run(ctx(adaptive=AdaptiveConfig(max_repetitions=4)), {1: [100, 140, 90, 120], 2: [130],
                                                                   4: [140], 8: [140]})
    at1 = [d for d in steps if d.level == 1]
    assert len(at1) == 4 and "CI" in at1[-1].reason


def test_a_wide_ci_that_cannot_move_the_answer_gets_no_more_repetitions():
    # 1 → 2 → 4 double whatever N=1 is within its CI: more precision there cannot change the knee at 4
    steps = run(ctx(adaptive=AdaptiveConfig(max_repetitions=4)), {1: [100, 140, 90, 120], 2: [200],
                                                                   4: [400], 8: [400]})
    assert len([d for d in steps if d.level == 1]) == 3 and steps[-1].action == "stop"  # N=1 at 2: ±212 %


def test_overlapping_cis_are_measured_more_never_defaulted_to_the_lowest_level():
    # N=2's mean gains but N=1's CI is wide: the planner measures the pair more instead of a knee at 1
    steps = run(ctx(adaptive=AdaptiveConfig(max_repetitions=3, ci_target=1.0)),
                {1: [60, 140, 100], 2: [120, 125, 130], 4: [130], 8: [130]})
    assert any(d.action == "resolve" for d in steps)
    assert "knee at N=1" not in steps[-1].reason


def test_a_contended_level_is_measured_again():
    steps = run(ctx(), {1: [100], 2: [200], 4: [400], 8: [400]}, contended={1: 1})
    assert steps[1].action == "remeasure" and steps[1].level == 1 and "contended" in steps[1].reason


def test_the_budget_stops_before_a_step_that_would_not_fit():
    steps = run(ctx(adaptive=AdaptiveConfig(budget_s=5.0)), {1: [100], 2: [200], 4: [400], 8: [400]},
                step_s=2.0)
    assert steps[-1].action == "stop" and "budget" in steps[-1].reason
    # the test's own clock (2 s a step, never the wall): N=1 twice fits (4 s), N=2 (~3.4 s more) does not
    assert [d.action for d in steps] == ["measure", "repeat", "stop"] and steps[-1].elapsed_s == 4.0


def test_a_missed_slo_ends_the_climb():
    slo = SloConfig(p95_ttft_ms=50, p95_tpot_ms=1000)
    steps = run(ctx(slo=slo), {1: [100], 2: [200], 4: [400], 8: [400]}, limit=200)
    assert steps[-1].action == "stop" and "SLO" in steps[-1].reason


def test_recorded_decisions_are_replayed_before_planning_on():
    first = run(ctx(), {1: [100, 100.2], 2: [200, 200.4], 4: [390, 390.6], 8: [392, 392.5]})
    gen = plan_lane(ctx(), first[:3])
    replayed = [next(gen)] + [gen.send(Feedback(None, 0.0, None)) for _ in range(2)]
    assert replayed == first[:3]


def test_decide_starts_at_1():
    d = decide(ctx(), Feedback(None, 0.0, None), [])
    assert (d.action, d.level, d.repetition) == ("measure", 1, 1)


@pytest.mark.parametrize("text,seconds", [("90", 90.0), ("90s", 90.0), ("2m", 120.0), ("1h30m", 5400.0)])
def test_budget_durations(text, seconds):
    from satbench.config.schema import parse_duration
    assert parse_duration(text) == seconds


def _met(lv):
    """`lv` with every window request meeting the SLO."""
    return lv.model_copy(update={"slo_attainment": 1.0})


def _few(lv, n_samples: int = 30):
    """`lv` with only `n_samples` latency samples (too few for its p95's CI to have an upper end), all
    meeting the SLO."""
    from satbench.metrics.stats import distribution
    lat = lv.latency
    few = {name: distribution([getattr(lat, name).p50] * n_samples)
           for name in ("ttft_ms", "tpot_ms", "e2e_ms")}
    return _met(lv).model_copy(update={"latency": lat.model_copy(update=few)})


def _done(*levels: int) -> list:
    """The decisions of a climb that measured each of `levels` twice."""
    first = decide(ctx(), Feedback(None, 0.0, None), [])
    out = []
    for n in levels:
        out += [first.model_copy(update={"level": n, "repetition": r, "action": a})
                for r, a in ((1, "measure"), (2, "repeat"))]
    return out


def test_only_the_level_the_answer_rests_on_gets_the_samples_its_p95_needs():
    from satbench.saturation.planner import SLO_RAMP_REQUESTS
    from tests.saturation.planner_fixtures import level

    levels = [_few(level(n, [100.0 * n, 100.0 * n + 0.2])) for n in (1, 2, 4)]  # 29 short of 59 each
    slo = SloConfig(p95_ttft_ms=500, p95_tpot_ms=500)
    d = decide(ctx(slo=slo, past_slots=False), Feedback(levels, 6.0, 1.0), _done(1, 2, 4))
    assert (d.action, d.level, d.repetition) == ("repeat", 4, 3)
    assert d.requests == 4 * (8 + SLO_RAMP_REQUESTS) and "the level the answer rests on" in d.reason
    levels[-1] = _met(level(4, [400.0, 400.2, 400.1]))  # now bounded, and within the SLO
    done = _done(1, 2, 4) + [d]
    d = decide(ctx(slo=slo, past_slots=False), Feedback(levels, 8.0, 1.0), done)
    assert d.action == "stop" and "4 slots" in d.reason  # N=1 and N=2 were never topped up


def test_when_the_level_the_answer_rests_on_misses_the_one_below_is_bounded():
    from tests.saturation.planner_fixtures import level

    levels = [_few(level(n, [100.0 * n, 100.0 * n + 0.2])) for n in (1, 2)] + [
        _met(level(4, [400.0, 400.2]))]  # N=4: TTFT 80 ms over 100 samples, bounded
    d = decide(ctx(slo=SloConfig(p95_ttft_ms=70, p95_tpot_ms=500), past_slots=False),
               Feedback(levels, 6.0, 1.0), _done(1, 2, 4))
    assert (d.action, d.level) == ("repeat", 2) and "N=4 misses the SLO" in d.reason


def test_a_p95_estimate_over_the_slo_ends_the_climb_without_more_samples():
    from tests.saturation.planner_fixtures import level

    lv = level(4, [400.0, 400.4])
    # too few to bound, but its estimate (80 ms) is over the target already
    lv = replaced(lv, {"latency.ttft_ms.n": 30})
    done = [decide(ctx(), Feedback([], 0.0, None), [])]
    done.append(done[0].model_copy(update={"level": 4, "repetition": 2, "action": "repeat"}))
    d = decide(ctx(slo=SloConfig(p95_ttft_ms=50, p95_tpot_ms=500)), Feedback([lv], 2.0, 1.0), done)
    assert d.action == "stop" and "p95 TTFT 80 ms > 50" in d.reason


def test_levels_below_an_slo_miss_get_no_repetitions_their_throughput_cannot_use():
    """N=2's p95 TTFT (40 ms) misses a 30 ms SLO, so the answer is at most 1 wherever the curve lies:
    N=1's and N=2's wide throughput CIs (±100 %) ask for no more repetitions; without the SLO they do."""
    from tests.saturation.planner_fixtures import level

    levels = [_met(level(1, [100.0, 130.0])), _met(level(2, [150.0, 210.0]))]
    slo = SloConfig(p95_ttft_ms=30, p95_tpot_ms=500)
    d = decide(ctx(slo=slo, ceiling=2), Feedback(levels, 6.0, 1.0), _done(1, 2))
    assert d.action == "stop" and "N=2 misses the SLO" in d.reason, d.reason
    d = decide(ctx(ceiling=2), Feedback(levels, 6.0, 1.0), _done(1, 2))
    assert d.action == "repeat" and "throughput CI" in d.reason, d.reason


def test_a_host_that_speeds_up_makes_no_step_between_neighbouring_levels():
    """A flat curve (100, 101, 102 tok/s) on a host that runs at 0.8 for the first two repetitions:
    measured back to back, N=1's two slow repetitions against N=2's fast ones would show a confident
    25 % gain and a knee at 2. Interleaved, each level's repetitions span the change: the planner
    measures more, and the answer is a range, not a step."""
    true = {1: 100.0, 2: 101.0, 4: 102.0}
    got: dict[int, list[float]] = {}
    gen = plan_lane(ctx(ceiling=4, slots=4, past_slots=False))
    d, steps = next(gen), []
    while d.action != "stop" and len(steps) < 60:
        steps.append(d)
        got.setdefault(d.level, []).append(true[d.level] * (0.8 if len(steps) <= 2 else 1.0 + 0.002 * (
            len(steps) % 3)))
        d = gen.send(Feedback(lane_result(got).levels, float(len(steps)), 1.0))
    firsts = {n: next(i for i, s in enumerate(steps) if s.level == n) for n in got}
    assert any(s.level == 1 and i > firsts[2] for i, s in enumerate(steps))  # interleaved
    assert any(s.level == 2 and i > firsts[4] for i, s in enumerate(steps))
    after_climb = [s.level for s in steps[firsts[4] + 1:]]  # the CI's repetitions go round the levels
    assert len(after_climb) >= 4 and all(a != b for a, b in itertools.pairwise(after_climb)), after_climb
    assert d.action == "stop" and "between 1 and 2" in d.reason and "knee" not in d.reason, d.reason


def test_a_level_with_a_sample_over_the_slo_is_not_topped_up_to_a_bound_it_cannot_meet():
    """N=2 has 30 samples, one TPOT of 70 ms over a 60 ms target: 59 samples would bound its p95 by
    their largest, ≥ 70 ms, so its repetition could only miss; N=1 is bounded instead. With the sample
    under the target, N=2 is the one topped up."""
    from satbench.metrics.stats import distribution
    from tests.saturation.planner_fixtures import level

    def with_tpot(lv, worst: float):
        return replaced(_few(lv), {"latency.tpot_ms": distribution([30.0] * 29 + [worst])})

    slo = SloConfig(p95_ttft_ms=5000, p95_tpot_ms=60)
    levels = [_few(level(1, [100.0, 100.2])), with_tpot(level(2, [200.0, 200.4]), 70.0)]
    d = decide(ctx(slo=slo, ceiling=2, past_slots=False), Feedback(levels, 6.0, 1.0), _done(1, 2))
    assert (d.action, d.level) == ("repeat", 1), d.reason
    assert "N=2 is left unbounded: a TPOT of 70.0 ms is over 60 already" in d.reason
    levels[1] = with_tpot(level(2, [200.0, 200.4]), 50.0)
    d = decide(ctx(slo=slo, ceiling=2, past_slots=False), Feedback(levels, 6.0, 1.0), _done(1, 2))
    assert (d.action, d.level) == ("repeat", 2) and "left unbounded" not in d.reason, d.reason


def test_the_bound_is_the_largest_sample_from_59_until_the_ci_has_an_upper_end():
    from satbench.saturation.slo import upper_is_largest
    assert [n for n in range(40, 100) if upper_is_largest(n)] == list(range(59, 72))


def test_after_the_climb_an_undetermined_range_is_repeated_before_the_other_levels():
    # N=8 may still gain over N=4 (an 8 % step, two noisy repetitions each): its range's levels get
    # their third repetitions before N=1 and N=2, whose CIs are also wider than ±5 %
    steps = run(ctx(slots=8, past_slots=False, adaptive=AdaptiveConfig(max_repetitions=3)),
                {1: [100, 108], 2: [200, 216], 4: [400, 440], 8: [470, 440]})
    after = [(d.action, d.level) for d in steps][8:]
    assert after[:2] == [("repeat", 4), ("repeat", 8)]
    assert "the range's levels first" in steps[8].reason
