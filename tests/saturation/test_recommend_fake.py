"""Recommendations on the fake server: with a fixed slot count the answer is the slot count;
a failed fairness check and an SLO pull it down, with the reason named."""

from __future__ import annotations

import json

import pytest

from satbench.analysis.results import ResultsFile, write_results
from satbench.analysis.verdicts import Verdict
from satbench.config.schema import SloConfig
from satbench.records.artifacts import render
from satbench.saturation.recommend import recommend, recommend_lane
from satbench.saturation.slo import slo_bound
from tests.builders import replaced


@pytest.fixture(scope="module")
def four_slot_run(tmp_path_factory):
    from tests.conftest import sweep_fake

    # constant iteration time: throughput grows with busy slots up to 4, then waits in the queue
    results, run_dir, _ = sweep_fake(tmp_path_factory.mktemp("rec"),
                                     dict(n_slots=4, prefill_ms_per_token=0.02, decode_iteration_ms=8.0),
                                     [1, 2, 4, 8], requests=16, reps=2, prompt=16, output=24)
    # the rates pinned to the script's (one token per busy slot per 8 ms, CI ±1 %): two repetitions on
    # a busy test machine can leave CIs too wide to name a knee (undetermined), and these tests are
    # about what binds, not where the knee lies (tests/saturation/test_knee_usl.py)
    for k, lv in enumerate(results.lanes[0].levels):
        rate = min(lv.concurrency, 4) / 0.008
        est = lv.throughput.output_tok_per_s.model_copy(
            update={"value": rate, "ci_low": rate * 0.99, "ci_high": rate * 1.01})
        results = replaced(results, {f"lanes.0.levels.{k}.throughput.output_tok_per_s": est})
    write_results(run_dir, results)
    return run_dir


def _bounded(levels):
    """As if each level had enough samples (>= 72) for its p95s' CIs to have an upper end: its largest
    sample (32 samples per level here leave the CI open, which meets no SLO target)."""
    return [replaced(lv, {f"latency.{name}.ci.p95.high": getattr(lv.latency, name).max
                          for name in ("ttft_ms", "tpot_ms", "e2e_ms")}) for lv in levels]


def test_recommendation_equals_the_slot_count(four_slot_run):
    rec = recommend(four_slot_run).lanes[0]
    # the knee is judged up to the ceiling (the 4 slots): N=8 past it cannot change the answer
    assert rec.slots == 4 and rec.knee is None and "(the ceiling N=4)" in rec.knee_reason
    assert rec.recommended_concurrency == 4 and rec.recommended_range is None
    assert rec.binding.reason == "slots"
    assert rec.server_confirmation.slots_saturated
    assert rec.server_confirmation.requests_deferred  # N=8 queued behind 4 slots
    assert rec.expected.concurrency == 4 and rec.expected.output_tok_per_s.value > 0


def test_recommendations_are_reproducible_except_their_creation_time(four_slot_run):
    a, b = render(recommend(four_slot_run)), render(recommend(four_slot_run))
    strip = lambda t: {k: v for k, v in json.loads(t).items() if k != "created_at"}  # noqa: E731
    assert strip(a) == strip(b)
    assert [ln for ln in a.splitlines() if "created_at" not in ln] == [ln for ln in b.splitlines()
                                                                      if "created_at" not in ln]


def _results(run_dir) -> ResultsFile:
    return ResultsFile.model_validate(json.loads((run_dir / "results.json").read_text()))


def test_a_failed_fairness_check_caps_the_recommendation(four_slot_run):
    results = _results(four_slot_run)
    lane = results.lanes[0].model_copy(update={"fairness": [
        Verdict(check="F1", name="equal requests", verdict="fail", concurrency=4),
        Verdict(check="S3", name="prompt behind prompt", verdict="pass", concurrency=2)]})
    rec = recommend_lane(lane, results)
    # nothing at or above 4; the curve still gains at 2, and 3, the most fairness allows, was not measured
    assert (rec.recommended_concurrency, rec.recommended_range) == (2, (2, 3))
    assert rec.binding.reason == "undetermined" and "the ceiling N=3 is not measured" in rec.undetermined
    assert rec.fairness_cap == 3 and rec.fairness_failures == ["F1 (equal requests) failed at 4 in flight"]
    assert rec.knee_ceiling == 3 and rec.confidence is not None and not rec.confidence.settled


def test_an_slo_that_a_level_misses_binds(four_slot_run):
    results = _results(four_slot_run)
    lane = results.lanes[0]
    by_n = {lv.concurrency: lv for lv in lane.levels}
    # at N=8 half the requests wait a whole request for a slot: its TTFT jumps past every lower level's
    below = max(by_n[n].latency.ttft_ms.max for n in (1, 2, 4))
    assert by_n[8].latency.ttft_ms.p50 > below
    tight = SloConfig(p95_ttft_ms=(below + by_n[8].latency.ttft_ms.p50) / 2, p95_tpot_ms=1e7)
    levels = _bounded([lv.model_copy(update={"slo_attainment": 1.0}) for lv in lane.levels])
    lane = replaced(lane, {"levels": levels, "slo": tight})
    n, why = slo_bound(lane.levels, tight)
    assert n == 4 and "N=8 misses the SLO" in why
    lane = replaced(lane, {"runtime.total_slots": 16})  # so that the SLO, not the slots, is what binds
    rec = recommend_lane(lane, results)
    assert rec.recommended_concurrency == 4 and rec.binding.reason == "slo"
    assert rec.max_concurrency_under_slo == 4


@pytest.mark.alone  # one-slot steps of the fake's wall-clock throughput: other workers' load moves the answer
def test_refine_finds_a_saturation_point_between_powers_of_two(fake_server, tmp_path):
    from satbench.cli.main import main

    fake = fake_server(n_slots=6, prefill_ms_per_token=0.02, decode_iteration_ms=4.0)
    out = tmp_path / "run"
    # three repetitions of 36 requests: with two, Student's t (df = 1) makes every CI too wide for
    # the one-slot steps between 4 and 8 to count as real gains
    assert main(["sweep", "--url", fake.base_url, "--concurrency", "1,2,4,8", "--requests-per-level", "36",
                 "--repetitions", "3", "--prompt-tokens", "16", "--output-tokens", "16", "--refine",
                 "-o", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    measured = [lv["concurrency"] for lv in results["lanes"][0]["levels"]]
    assert measured == [1, 2, 4, 5, 6, 7, 8]  # 4 → 8 scaled at 75 %: the knee lies between them
    rec = json.loads((out / "recommendations.json").read_text())["lanes"][0]
    # the knee is 6 or 7: one waiting request (N = slots + 1) hides the client's turnaround between
    # requests, a real ~5 % gain; on a busy host the one-slot steps can fall inside each other's CIs,
    # and the knee is then undetermined (never a lower level); the 6 slots bind either way
    # the knee is judged up to the ceiling, the 6 slots: 6 itself (7 queues), still rising to 6, or
    # undetermined (on a busy host the one-slot steps can fall inside each other's CIs)
    undetermined = rec["knee"] is None and "may still gain" in rec["knee_reason"]
    rising = rec["knee"] is None and "(the ceiling N=6)" in rec["knee_reason"]
    assert rec["knee"] in (5, 6) or undetermined or rising, rec["knee_reason"]
    assert rec["recommended_concurrency"] == 6 and rec["slots"] == 6


def _fail_requests(lane, n: int, failed: int, kind: str = "timeout", measured: int | None = None):
    """`lane` with `failed` of level `n`'s requests (of `measured`, else as many as it has) failing."""
    k = [lv.concurrency for lv in lane.levels].index(n)
    measured = lane.levels[k].counts.requests_measured if measured is None else measured
    return replaced(lane, {f"levels.{k}.counts.requests_measured": measured,
                           f"levels.{k}.counts.requests_ok": measured - failed,
                           f"levels.{k}.counts.errors_by_type": {kind: failed}})


def test_a_level_where_requests_fail_is_not_recommended(four_slot_run):
    """Half the requests at N=4 timed out: N=4 may not be advertised although its throughput is the best."""
    results = _results(four_slot_run)
    lane = results.lanes[0]
    half = next(lv for lv in lane.levels if lv.concurrency == 4).counts.requests_measured // 2
    rec = recommend_lane(_fail_requests(lane, 4, half), results)
    assert rec.error_cap == 3 and rec.recommended_concurrency == 2
    assert rec.binding.reason == "errors"
    assert "N=4:" in rec.binding.detail and "timeout×" in rec.binding.detail
    lane = _fail_requests(lane, 4, 2, measured=200)  # exactly 1 %: tolerated
    assert recommend_lane(lane, results).recommended_concurrency == 4
    lane = _fail_requests(lane, 4, 3)  # 1.5 %
    assert recommend_lane(lane, results).recommended_concurrency == 2
    lane = _fail_requests(lane, 4, 100, kind="cancelled")  # satbench stopped them (Ctrl-C): not the server
    assert recommend_lane(lane, results).recommended_concurrency == 4


def test_no_recommendation_when_every_measured_level_is_above_the_limit(four_slot_run):
    """A check failed at 2 in flight but the sweep measured from 4 up: nothing measured is safe, so
    nothing is recommended (it used to fall back to the lowest level, above the cap)."""
    results = _results(four_slot_run)
    lane = results.lanes[0].model_copy(update={
        "levels": [lv for lv in results.lanes[0].levels if lv.concurrency >= 4],
        "fairness": [Verdict(check="S3", name="prompt behind prompt", verdict="fail", concurrency=2)]})
    rec = recommend_lane(lane, results)
    assert rec.recommended_concurrency is None and rec.expected is None and rec.fairness_cap == 1
    assert rec.binding.reason == "fairness" and "measure N ≤ 1" in rec.binding.detail


def test_every_level_failing_its_requests_or_its_slo_gives_no_recommendation(four_slot_run):
    results = _results(four_slot_run)
    lane = results.lanes[0]
    for lv in lane.levels:
        lane = _fail_requests(lane, lv.concurrency, lv.counts.requests_measured)
    rec = recommend_lane(lane, results)
    assert rec.recommended_concurrency is None and rec.error_cap == 0
    assert "no concurrency is safe" in rec.binding.detail
    lane = _results(four_slot_run).lanes[0]
    lane = lane.model_copy(update={"slo": SloConfig(p95_ttft_ms=0.001, p95_tpot_ms=0.001),
                                   "levels": _bounded(lane.levels)})  # a target missed, not a p95 unbounded
    rec = recommend_lane(lane, results)
    assert rec.recommended_concurrency is None and rec.binding.reason == "slo"
    assert rec.max_concurrency_under_slo is None


def test_a_server_that_failed_at_the_lowest_level_leaves_nothing_to_recommend(four_slot_run):
    from satbench.records.manifest import ServerFailure

    results = _results(four_slot_run)
    lane = results.lanes[0]
    lane = lane.model_copy(update={"server_failures": [ServerFailure(
        lane=lane.lane, scenario="solo", level=1, repetition=2, session=0, unit="solo/default/1/2",
        reason="the server died at N=1")]})
    rec = recommend_lane(lane, results)  # repetition 1 at N=1 was fine, but the server died there too
    assert rec.server_failure_cap == 0 and rec.recommended_concurrency is None
    assert rec.binding.reason == "server_failed"


def test_an_e2e_target_binds_the_slo_bound(four_slot_run):
    lane = _results(four_slot_run).lanes[0]
    lane = lane.model_copy(update={"levels": _bounded([lv.model_copy(update={"slo_attainment": 1.0})
                                                       for lv in lane.levels])})
    by_n = {lv.concurrency: lv for lv in lane.levels}
    below = max(by_n[n].latency.e2e_ms.max for n in (1, 2, 4))
    between = (below + by_n[8].latency.e2e_ms.p50) / 2  # 8 queues: its E2E jumps
    assert by_n[8].latency.e2e_ms.p50 > below
    n, why = slo_bound(lane.levels, SloConfig(p95_ttft_ms=1e7, p95_tpot_ms=1e7, p95_e2e_ms=between))
    assert n == 4 and "N=8 misses the SLO: p95 E2E" in why
    assert slo_bound(lane.levels, SloConfig(p95_ttft_ms=1e7, p95_tpot_ms=1e7))[0] == 8


def test_a_p95_too_few_samples_can_bound_meets_no_slo(four_slot_run):
    """32 samples: the p95 has no 95 % upper bound, so no target is shown met, however loose (the
    largest sample is not one below 59 samples: it lies above the p95 only with probability 1 - 0.95^n)."""
    lane = _results(four_slot_run).lanes[0]
    lane = lane.model_copy(update={"levels": [lv.model_copy(update={"slo_attainment": 1.0})
                                              for lv in lane.levels]})
    loose = SloConfig(p95_ttft_ms=1e7, p95_tpot_ms=1e7)
    assert lane.levels[0].latency.ttft_ms.n < 59 and lane.levels[0].latency.ttft_ms.max < 1e7
    n, why = slo_bound(lane.levels, loose)
    assert n is None and "no level is shown to meet the SLO: N=1 (32 samples)" in why and "below 59" in why
    lane = lane.model_copy(update={"slo": loose})
    rec = recommend_lane(lane, _results(four_slot_run))
    assert rec.recommended_concurrency is None and rec.binding.reason == "slo"
    assert slo_bound(_bounded(lane.levels), loose)[0] == 8


def test_the_file_restates_its_rules_and_verify_ignores_only_their_wording(four_slot_run):
    from satbench.saturation.recommend import recommendations_differ

    text = render(recommend(four_slot_run))
    data = json.loads(text)
    assert {"knee", "slo_bound", "recommended_concurrency", "usl"} <= set(data["definitions"])
    assert "10% per doubling" in data["definitions"]["knee"]
    assert recommendations_differ(four_slot_run, text) is None
    data["definitions"]["knee"] = "worded by another build"
    assert recommendations_differ(four_slot_run, json.dumps(data)) is None
    data["lanes"][0]["recommended_concurrency"] = 3
    assert recommendations_differ(four_slot_run, json.dumps(data)) is not None


def _with_memory(lane, ram_left):
    """The lane's memory as lane_memory derives it: 4 slots of 2 MiB and `ram_left` bytes left."""
    from satbench.metrics.slot_memory import MEMORY_MARGIN_BYTES, lane_memory
    from satbench.records.manifest import BufferSize, ServerMemory

    kv = BufferSize(kind="kv", buffer="CPU", bytes=8 << 20)
    memory = ServerMemory(buffers=[kv], n_seq_max=4, ram_available_bytes=ram_left + MEMORY_MARGIN_BYTES)
    lane = replaced(lane, {"runtime.memory": memory})
    return lane.model_copy(update={"memory": lane_memory(lane.runtime)})


def test_the_slots_that_fit_in_memory_bind_when_tightest(four_slot_run):
    results = _results(four_slot_run)
    lane = results.lanes[0]
    lane = _with_memory(lane, ram_left=-(4 << 20))  # 4 MiB short of the margin: two 2-MiB slots too many
    rec = recommend_lane(lane, results)
    assert rec.recommended_concurrency == 2 and rec.memory_cap == 2
    assert rec.binding.reason == "memory" and rec.binding.resource == "memory"
    assert "2 slots fit" in rec.binding.detail and rec.memory is not None
    lane = _with_memory(lane, ram_left=(10_000 - 4) * (2 << 20))  # room for many more: the usual limits bind
    rec = recommend_lane(lane, results)
    assert rec.recommended_concurrency == 4 and rec.memory_cap == 10_000
    assert rec.binding.reason in ("slots", "knee")
