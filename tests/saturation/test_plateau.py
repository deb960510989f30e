"""No knee from a plateau, no knee from a doubt: a flat step below a rising level, a gain the
repetitions cannot rule out, and an unmeasured ceiling each leave the answer open (a range), never a
confident knee (issue 31's cases, as curves with known answers)."""

from __future__ import annotations

import pytest

from satbench.config.schema import AdaptiveConfig
from satbench.saturation.confidence import confidence
from satbench.saturation.gain import Point, p_gain, shape
from satbench.saturation.knee import marginal_gain_knee, points_of
from satbench.saturation.recommend import recommend_lane
from tests.saturation.planner_fixtures import lane_result
from tests.saturation.test_planner import ctx, run

# measured on a 2-core AMD host with the embedded Gemma 3 270M: a batch of 2 costs twice a batch of 1
PLATEAU = {1: [45.4, 44.1, 46.9], 2: [47.4, 46.0, 48.6], 4: [63.3, 60.1, 66.0], 8: [71.8, 69.0, 74.4]}


def points(curve: dict[int, list[float]]) -> list[Point]:
    return points_of(lane_result(curve).levels)


def test_a_flat_step_below_a_rising_level_is_a_plateau_not_a_knee():
    k = marginal_gain_knee(points(PLATEAU), ceiling=8)
    assert k.knee != 1 and k.last_real_gain_to >= 4
    assert "flat from 1 to 2" in k.shape and "rising from 2 to 4" in k.shape and "not concave" in k.shape


def test_a_flat_step_with_the_ceiling_unmeasured_is_a_range_not_a_knee():
    k = marginal_gain_knee(points({n: PLATEAU[n] for n in (1, 2)}), ceiling=8)
    assert k.knee is None and k.undetermined is not None
    assert (k.last_real_gain_to, k.range_high) == (1, 8) and not k.ceiling_measured
    assert "ceiling N=8 is not measured" in k.undetermined and k.unresolved == []  # measuring decides


def test_a_doubt_is_not_read_as_no_gain():
    # N=2 gains 12 % on average with a wide spread: P(gain) is near 0.5, which shows nothing
    doubt = {1: [97.0, 91.0, 103.0], 2: [124.0, 104.0, 118.0]}
    pts = points(doubt)
    assert 0.05 < p_gain(pts[0], pts[1]) < 0.9
    k = marginal_gain_knee(pts, ceiling=2)
    assert k.knee is None and k.unresolved == [1, 2] and (k.last_real_gain_to, k.range_high) == (1, 2)


def test_a_knee_stands_with_evidence_of_no_gain_and_the_ceiling_measured():
    flat = {1: [100, 101, 99], 2: [190, 192, 191], 4: [195, 194, 196], 8: [196, 197, 195]}
    k = marginal_gain_knee(points(flat), ceiling=8)
    assert k.knee == 2 and k.undetermined is None and all(p < 0.05 for p in k.p_gain.values())
    assert k.shape == "rising from 1 to 2, flat from 2 to 8"


def test_still_rising_to_an_unmeasured_ceiling_is_a_range():
    k = marginal_gain_knee(points({1: [100, 101], 2: [200, 201], 4: [400, 401]}), ceiling=8)
    assert k.knee is None and (k.last_real_gain_to, k.range_high) == (4, 8)


@pytest.mark.parametrize("slots", [8, 6])
def test_the_planner_climbs_past_a_flat_step_to_the_slot_count(slots):
    steps = run(ctx(slots=slots, past_slots=False, ceiling=8,
                    adaptive=AdaptiveConfig(ci_target=0.2, max_repetitions=5)),
                {1: PLATEAU[1], 2: PLATEAU[2], 4: PLATEAU[4], 6: PLATEAU[8], 8: PLATEAU[8]}, limit=80)
    climbed = [d.level for d in steps if d.action == "measure"]
    assert climbed == [1, 2, 4, slots]  # a ceiling that is not a power of two is measured itself
    assert steps[-1].action == "stop" and "knee at N=1" not in steps[-1].reason


def test_the_planner_resolves_a_doubt_before_it_stops():
    doubt = {1: [97.0, 91.0, 103.0, 96.0, 99.0], 2: [124.0, 104.0, 118.0, 110.0, 121.0]}
    steps = run(ctx(slots=2, past_slots=False, ceiling=2, adaptive=AdaptiveConfig(ci_target=1.0)), doubt)
    assert [d.action for d in steps].count("resolve") >= 2
    assert steps[-1].action == "stop"


def recommendation(curve, slots=8):
    from tests.report.test_compare import results

    lane = lane_result(curve)
    lane = lane.model_copy(update={"runtime": lane.runtime.model_copy(update={"total_slots": slots})})
    return recommend_lane(lane, results(lane))


def test_the_recommendation_of_a_doubt_is_a_range_with_its_lower_end():
    rec = recommendation({1: [97.0, 91.0, 103.0], 2: [124.0, 104.0, 118.0], 4: [142.0, 130.0, 150.0],
                          8: [161.4, 150.0, 170.0]})
    assert rec.binding.reason == "undetermined" and rec.recommended_range is not None
    lo, hi = rec.recommended_range
    assert rec.recommended_concurrency == lo and lo < hi <= 8
    assert f"between {lo} and {hi}" in rec.binding.detail
    assert rec.confidence is not None and not rec.confidence.settled


def test_the_recommendation_of_a_plateau_is_not_1():
    rec = recommendation(PLATEAU)
    assert rec.recommended_concurrency is not None and rec.recommended_concurrency >= 4
    assert "not concave" in rec.curve_shape


def test_a_settled_recommendation_names_its_ceiling():
    rec = recommendation({1: [100, 101, 99], 2: [190, 192, 191], 4: [195, 194, 196], 8: [196, 197, 195]})
    assert (rec.recommended_concurrency, rec.binding.reason, rec.recommended_range) == (2, "knee", None)
    assert rec.confidence.settled and "settled against the ceiling N=8" in rec.confidence.statement
    assert set(rec.confidence.p_by_level) == {4, 8}  # every level that could change it, not the next one


def test_confidence_ignores_levels_another_limit_forbids():
    pts = points({1: [100, 101, 99], 2: [200, 201, 199], 4: [400, 401, 399]})
    c = confidence(2, pts, cap=2, ceiling=4)
    assert c.settled and c.p_by_level == {} and "no measured level above N=2 can change it" in c.statement
    c = confidence(2, pts, cap=None, ceiling=4)
    assert not c.settled and c.higher_level == 4 and c.p_higher_gains > 0.99


def test_shape_names_a_falling_step():
    assert shape(points({1: [100, 101, 99], 2: [200, 201, 199], 4: [120, 121, 119]})) == (
        "rising from 1 to 2, falling from 2 to 4")


def test_the_lower_end_of_a_range_is_never_settled():
    pts = points({1: [100, 101, 99], 2: [200, 201, 199], 4: [400, 401, 399]})
    c = confidence(2, pts, cap=3, ceiling=4, span=(2, 3))
    assert not c.settled and "between 2 and 3" in c.statement
    c = confidence(2, pts, cap=3, ceiling=4)
    assert c.settled and "N=3, the most the other limits allow" in c.statement
