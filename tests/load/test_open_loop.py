"""The open-loop generator: a seeded Poisson schedule, kept whatever the server does, with at most
max_concurrency requests in flight and the wait for a free one recorded (load/open_loop.py)."""

from __future__ import annotations

import itertools
import json
import statistics

import pytest

from satbench.analysis.analyze import analyze_run
from satbench.config.schema import SloConfig
from satbench.load.open_loop import arrival_offsets_ns, open_seed
from satbench.metrics.open_loop import max_in_flight
from satbench.pipeline import new_sweep as Sweep
from satbench.records.events import LevelMark, RequestEvent, read_events
from satbench.saturation.recommend import recommend
from tests.conftest import FakeProcess, url_lane_config


def test_the_schedule_is_seeded_poisson():
    a, b = arrival_offsets_ns(4.0, 3000, seed=7), arrival_offsets_ns(4.0, 3000, seed=7)
    assert a == b and a[0] == 0 and a == sorted(a)
    assert arrival_offsets_ns(4.0, 3000, seed=8) != a
    gaps = [(y - x) / 1e9 for x, y in itertools.pairwise(a)]
    # exponential gaps: mean 1/rate and standard deviation equal to the mean (seeded: no flakiness)
    assert statistics.mean(gaps) == pytest.approx(0.25, rel=0.05)
    assert statistics.stdev(gaps) == pytest.approx(0.25, rel=0.08)
    assert len({open_seed(0, k, r) for k in range(1, 65) for r in range(1, 11)}) == 640


@pytest.fixture(scope="module")
def open_run(tmp_path_factory):
    """A 2-slot fake, one closed-loop level, then rates 10/s and 200/s under a cap of 2 in flight:
    200/s arrives far faster than two slots of 16 tokens at 4 ms can serve."""
    tmp = tmp_path_factory.mktemp("open")
    fake = FakeProcess(tmp, dict(n_slots=2, prefill_ms_per_token=0.1, decode_iteration_ms=4.0))
    cfg = url_lane_config(fake.base_url, [1], requests=8, reps=1,
                          slo=SloConfig(p95_ttft_ms=150.0, p95_tpot_ms=50.0))
    lane = cfg.lanes[0].model_copy(update={"rates": [10.0, 200.0], "max_concurrency": 2, "rate_requests": 24})
    cfg = cfg.model_copy(update={"lanes": [lane]})
    run_dir = tmp / "run"
    run_dir.mkdir()
    try:
        results = Sweep(cfg, run_dir, ["satbench", "test"]).run()
    finally:
        schedule = {rec["id"]: rec for rec in fake.stop()}
    return results, run_dir, schedule


def _open(run_dir, k):
    return [e for e in read_events(run_dir)
            if isinstance(e, RequestEvent) and e.scenario == "open" and e.level == k]


def test_arrivals_follow_the_schedule_and_the_cap_holds(open_run):
    _, run_dir, schedule = open_run
    for k, rate in ((1, 10.0), (2, 200.0)):
        events = sorted(_open(run_dir, k), key=lambda e: e.seq)
        assert len(events) == 24 and all(e.ok for e in events)
        assert {e.request_id for e in events} <= set(schedule)
        offsets = arrival_offsets_ns(rate, 24, open_seed(0, k, 1))
        start = events[0].targeted_ns
        assert [e.targeted_ns - start for e in events] == offsets  # the arrivals are the schedule's
        assert all(e.sent_ns >= e.targeted_ns for e in events)
        assert max_in_flight(events) <= 2 and {e.stream for e in events} <= {0, 1}
    # the overloaded rate: requests wait for a free slot, in arrival order
    fast = sorted(_open(run_dir, 2), key=lambda e: e.seq)
    waits = [(e.sent_ns - e.targeted_ns) / 1e6 for e in fast]
    assert max(waits) > 50.0
    assert [e.sent_ns for e in fast] == sorted(e.sent_ns for e in fast)


def test_every_rate_is_bracketed_by_marks(open_run):
    _, run_dir, _ = open_run
    marks = [m for m in read_events(run_dir) if isinstance(m, LevelMark) and m.scenario == "open"]
    assert [(m.kind, m.level, m.status) for m in marks] == [
        ("level_start", 1, "running"), ("level_end", 1, "complete"),
        ("level_start", 2, "running"), ("level_end", 2, "complete")]


def test_rates_are_analysed_and_the_highest_within_the_slo_recommended(open_run):
    results, run_dir, _ = open_run
    slow, fast = results.lanes[0].rates
    assert (slow.rate_rps, fast.rate_rps) == (10.0, 200.0)
    assert slow.requests == slow.ok == 24 and slow.max_concurrency == 2
    assert slow.slo_attainment == 1.0
    # 200/s overloads two slots: the wait and TTFT from arrival grow past the 150 ms target
    assert "fell_behind" in fast.warnings
    assert fast.ttft_from_arrival_ms.p95 > fast.ttft_ms.p95
    assert fast.wait_ms.p95 > 100.0
    assert fast.goodput_rps < fast.completed_rps
    assert analyze_run(run_dir) == results  # analyze reproduces the sweep's figures
    rec = recommend(run_dir).lanes[0].rate
    # 24 requests bound no p95 (59 needed): 10/s is unbounded, 200/s is seen to miss
    assert rec is not None and rec.max_rate_rps is None and rec.max_concurrency == 2
    assert [s.standing for s in rec.rates] == ["unbounded", "misses"]
    assert rec.reason.startswith("no rate is shown to meet the SLO from arrival; 200/s misses the SLO: ")
    assert "p95 TTFT from arrival" in rec.reason and "not yet bounded: 10/s" in rec.reason
    assert json.loads((run_dir / "results.json").read_text())["lanes"][0]["rates"][1]["rate_rps"] == 200.0


def test_the_report_shows_the_rates_and_draws_goodput_against_rate(open_run):
    from satbench.pipeline import recommendations, report

    _, run_dir, _ = open_run
    recommendations(run_dir)
    files = report(run_dir)
    evidence = (run_dir / "EVIDENCE.md").read_text()
    assert "default: open-loop rates (goodput against the offered rate)" in evidence
    assert "| 200 |" in evidence and "fell_behind" in evidence
    assert "default: highest rate within the SLO: none (max_concurrency 2)" in evidence
    assert (run_dir / "plots" / "default-goodput.png").stat().st_size > 10_000
    assert "default-goodput.png" in (run_dir / "report.html").read_text()
    assert files is not None
