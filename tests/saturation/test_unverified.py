"""A fairness check left inconclusive at or below the answer verified nothing there: the answer is the
top of a range whose lower end, the highest measured level below the check, is recommended."""

from __future__ import annotations

from pathlib import Path

from satbench.analysis.results import read_results
from satbench.analysis.verdicts import inconclusive
from satbench.report.table import doubts
from satbench.saturation.recommend import recommend_lane

BUNDLE = Path(__file__).resolve().parents[2] / "evidence" / "cpu-2core-2026-12-01" / "run"
WHY = "size 0: the same request alone took 215.4–340.5 ms in 2 tries: the host was too unsteady"


def _dense_with(*checks: tuple[str, int]):
    results = read_results(BUNDLE)
    lane = next(r for r in results.lanes if r.lane == "dense")
    verdicts = [inconclusive(c, WHY).model_copy(update={"concurrency": at}) for c, at in checks]
    return lane.model_copy(update={"fairness": verdicts}), results


def test_the_bundle_answers_4_without_the_checks():
    lane, results = _dense_with()
    rec = recommend_lane(lane, results)
    assert rec is not None and rec.recommended_concurrency == 4 and rec.recommended_range is None


def test_an_inconclusive_check_at_the_answer_makes_it_a_range():
    lane, results = _dense_with(("F2", 4))
    rec = recommend_lane(lane, results)
    assert rec is not None
    assert (rec.recommended_concurrency, rec.recommended_range, rec.binding.reason) == (2, (2, 4), "fairness")
    assert rec.expected is not None and rec.expected.concurrency == 2
    assert rec.confidence is not None and not rec.confidence.settled
    [line] = rec.fairness_unverified
    assert line.startswith("F2 (mixed sizes) inconclusive at 4 in flight: size 0:")
    assert "between 2 and 4" in rec.binding.detail
    assert f"UNVERIFIED fairness — {line}" in doubts(rec)


def test_an_inconclusive_check_above_the_answer_changes_nothing():
    lane, results = _dense_with(("F3", 12))
    rec = recommend_lane(lane, results)
    assert rec is not None and rec.recommended_concurrency == 4 and rec.recommended_range is None
    assert rec.fairness_unverified == []


def test_an_slo_answer_below_a_level_not_yet_bounded_is_a_range():
    from satbench.saturation.knee import Knee
    from satbench.saturation.recommend import slo_range_high
    from satbench.saturation.slo import SloStanding

    standing = SloStanding(bound=1, why="N=3 misses the SLO", missed_at=3, unbounded=((2, 40),))
    unclear = Knee(knee=None, reason="r", undetermined="r", last_real_gain_to=1, range_high=2)
    assert slo_range_high(standing, 1, unclear, [("slots", 8, "8 slots")]) == 2
    assert slo_range_high(standing, 1, Knee(knee=1, reason="flat", last_real_gain_to=1), []) is None  # no use
    assert slo_range_high(standing, 1, unclear, [("fairness", 1, "F2 failed at 2")]) is None
    bounded = SloStanding(bound=2, why="N=3 misses the SLO", missed_at=3)
    assert slo_range_high(bounded, 2, unclear, []) is None  # N=2 shown to meet: the answer is 2
