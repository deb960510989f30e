"""The statistics behind the verdicts: the CI decision rule, an F1 estimate that does not drift
with the number of requests, determinism, and a marginal verdict that warns without capping."""

import random
from types import SimpleNamespace

from satbench.analysis.checks import lane_verdicts
from satbench.analysis.fairness_checks import equal_requests
from satbench.analysis.intervals import decide, decision_level, statistic
from satbench.analysis.starvation_checks import prompt_vs_prompt
from satbench.analysis.verdicts import Calibration, judged
from satbench.config.schema import FairnessConfig, LaneConfig, ServerParams, WorkloadConfig
from satbench.metrics.quantiles import T_975, t_two_sided_quantile
from satbench.saturation.recommend import fairness_cap, fairness_marginal
from satbench.workload.fairness_plan import make_plan
from tests.builders import ev

LANE = LaneConfig(workload=WorkloadConfig(prompt_tokens=32, output_tokens=16),
                  server=ServerParams(n_batch=256))
PLAN = make_plan(LANE, 4)
CAL = Calibration(prefill_tok_per_s=100_000.0, decode_iteration_ms=5.0)


def _tag(e, check: str, role: str, *, stream: int = 0, seq: int = 0, rep: int = 1, phase: str = "measured"):
    return e.model_copy(update={"check": check, "role": role, "stream": stream, "seq": seq, "repetition": rep,
                                "scenario": "fairness", "phase": phase})


# -- the decision rule --------------------------------------------------------------------------

def test_the_ci_decides_pass_fail_or_marginal():
    assert decide(0.9, 1.05, 1.1) == "pass"
    assert decide(1.12, 1.3, 1.1) == "fail"
    assert decide(1.05, 1.15, 1.1) == "marginal"
    assert decide(None, 1.0, 1.1) == "pass" and decide(1.2, None, 1.1) == "fail"
    assert decide(None, None, 1.1) == "marginal"  # too few samples to bound either end


def test_a_check_fails_on_any_statistic_passes_on_all_and_is_marginal_between():
    level = decision_level(3)
    ok = statistic("a", 1.0, (0.9, 1.05), 1.1, level=level, method="t", n=3)
    bad = statistic("b", 2.0, (1.5, 2.5), 1.1, level=level, method="t", n=3)
    unsure = statistic("c", 1.1, (1.0, 1.2), 1.1, level=level, method="t", n=3)
    assert judged("S1", [ok, ok]).verdict == "pass"
    assert judged("S1", [ok, bad]).verdict == "fail" and judged("S1", [unsure, bad]).verdict == "fail"
    assert judged("S1", [ok, unsure]).verdict == "marginal"


def test_the_level_is_bonferroni_over_the_looks_the_cap_allows():
    cfg = FairnessConfig(s3_repetitions=3, s3_rounds_max=6)
    assert cfg.looks("S3") == 4 and decision_level(cfg.looks("S3")) == 1 - 0.05 / 4
    assert FairnessConfig(f1_rounds_max=1).looks("F1") == 1 and decision_level(1) == 0.95


def test_a_cap_below_the_base_rounds_is_refused():
    import pytest
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="f2_rounds_max 2 is below its 3 base rounds"):
        FairnessConfig(f2_rounds_max=2)


def test_the_t_quantile_at_any_level():
    assert all(abs(t_two_sided_quantile(df, 0.95) - T_975[df - 1]) < 1e-12 for df in range(1, 100))
    assert t_two_sided_quantile(1, 0.99) > t_two_sided_quantile(1, 0.95) > t_two_sided_quantile(30, 0.95)


def _s3(second_waits_ms: list[float]) -> list:
    """S3 pairs whose second TTFT exceeds the first's TTFT + its own prefill (the first's TTFT, 20 ms)
    by `second_waits_ms`."""
    evs = [_tag(ev(seq=i, sent_ms=100 * i, chunks_ms=[100 * i + 20, 100 * i + 21]), "S3", "solo", seq=i)
           for i in range(2)]
    for k, wait in enumerate(second_waits_ms):
        t = 400 + 200 * k
        evs.append(_tag(ev(sent_ms=t, chunks_ms=[t + 20, t + 21]), "S3", "first", rep=k + 1))
        second = ev(sent_ms=t + 10, chunks_ms=[t + 50 + wait, t + 51 + wait])
        evs.append(_tag(second, "S3", "second", stream=1, rep=k + 1))
    return evs


def test_s3_on_constructed_pairs_passes_fails_or_is_marginal():
    """Bound: 2 iterations of 5 ms + jitter 0 = 10 ms."""
    cfg = FairnessConfig()
    passed = prompt_vs_prompt(_s3([1.0, 1.5, 2.0]), PLAN, CAL, cfg)
    failed = prompt_vs_prompt(_s3([40.0, 41.0, 42.0]), PLAN, CAL, cfg)
    straddling = prompt_vs_prompt(_s3([0.0, 20.0, 10.0]), PLAN, CAL, cfg)
    assert (passed.verdict, failed.verdict, straddling.verdict) == ("pass", "fail", "marginal")
    s = straddling.statistics[0]
    assert s.ci_low < s.bound < s.ci_high and s.estimate == 10.0 and s.ci_level == 1 - 0.05 / cfg.looks("S3")
    assert passed.rounds == 3 and passed.rounds_max == cfg.s3_rounds_max


# -- F1 estimates the scheduler, not the sample ------------------------------------------------

def _slow_slot(requests: int, seed: int = 7, tokens: int = 96, it_ms: float = 10.0) -> list:
    """4 closed-loop streams on a batching server with 10 ms iterations; stream 1's slot gets a
    token in only 11 of every 12 iterations (rate 11/12); every chunk arrives with up to 2 ms of
    client jitter. `requests` in all (each stream's first a warmup)."""
    rng = random.Random(seed)
    events, per_stream = [], requests // 4
    for s in range(4):
        k, t = 0, 0.0
        for j in range(per_stream):
            sent, chunks = t, []
            while len(chunks) < tokens:
                k += 1
                if s == 1 and k % 12 == 0:
                    continue
                chunks.append(k * it_ms + rng.uniform(0, 2.0))
            chunks.sort()
            events.append(_tag(ev(stream=s, seq=j, sent_ms=sent, chunks_ms=chunks), "F1", "equal", stream=s,
                               seq=j, phase="warmup" if j == 0 else "measured"))
            t = chunks[-1]
    return events


def test_f1_estimates_the_rate_ratio_whatever_the_number_of_requests():
    """A slot served at 11/12 of its neighbours' rate reads 12/11 = 1.09 with 8 requests and with 64;
    the max/min of per-request ratios it replaces grew with the requests compared."""
    few, many = (equal_requests(_slow_slot(n), PLAN, CAL, FairnessConfig()).statistics[0] for n in (8, 64))
    assert few.name == many.name == "service_ratio"
    assert abs(few.estimate - 12 / 11) < 0.015 and abs(many.estimate - 12 / 11) < 0.015, (few, many)
    assert few.ci_low <= 12 / 11 <= few.ci_high and many.ci_low <= 12 / 11 <= many.ci_high
    assert many.ci_high - many.ci_low < few.ci_high - few.ci_low  # more requests, a narrower CI


def test_a_verdict_is_the_same_from_the_same_events_in_any_order():
    events = _slow_slot(16)
    a = equal_requests(events, PLAN, CAL, FairnessConfig())
    b = equal_requests(list(reversed(events)), PLAN, CAL, FairnessConfig())
    assert a.model_dump() == b.model_dump()
    evs = [e.model_copy(update={"lane": "default"}) for e in _s3([0.0, 20.0, 10.0])]
    cfg = FairnessConfig(checks=["S3"])
    cal = [_tag(ev(sent_ms=-50, chunks_ms=[-45, -44]), "CAL", "prefill"),
           _tag(ev(sent_ms=-40, chunks_ms=[-35 + 5 * k for k in range(6)]), "CAL", "decode")]
    reordered = list(reversed(cal + evs))
    assert lane_verdicts(cal + evs, PLAN, cfg, True) == lane_verdicts(reordered, PLAN, cfg, True)


# -- a marginal verdict warns, it does not cap ---------------------------------------------------

def test_a_marginal_verdict_does_not_set_the_fairness_cap():
    marginal = prompt_vs_prompt(_s3([0.0, 20.0, 10.0]), PLAN, CAL, FairnessConfig()).model_copy(
        update={"concurrency": 2})
    failed = prompt_vs_prompt(_s3([40.0, 41.0, 42.0]), PLAN, CAL, FairnessConfig()).model_copy(
        update={"concurrency": 2})
    assert marginal.verdict == "marginal" and failed.verdict == "fail"
    assert fairness_cap(SimpleNamespace(fairness=[marginal])) == (None, [])
    [warning] = fairness_marginal(SimpleNamespace(fairness=[marginal]))
    assert warning.startswith("S3 (prompt behind prompt) marginal at 2 in flight: second_wait_ms 10 [")
    assert fairness_cap(SimpleNamespace(fairness=[marginal, failed]))[0] == 1


# -- the runner tops up while marginal, and analyze recomputes its verdict ------------------------

async def test_the_runner_adds_rounds_while_marginal_and_stops_once_decided():
    """One S3 pair cannot bound a mean (marginal): the runner sends more, one at a time, and stops at
    the first decided look (on this fair fake, well before its cap); every pair is recorded as its
    own repetition, and the events before the last pair were judged marginal."""
    from tests.fakes.fairness_harness import run_check_events

    cfg = FairnessConfig(s3_repetitions=1, s3_rounds_max=5, s3_iterations=4.0)
    v, events = await run_check_events("S3", cfg)
    pairs = sorted({e.repetition for e in events if e.check == "S3" and e.role in ("first", "second")})
    assert v.rounds >= 2 and pairs == list(range(1, v.rounds + 1)), (v.rounds, pairs, v.statistics)
    assert v.verdict != "marginal" or v.rounds == 5  # it stops at the first decided look, else at the cap
    earlier = [e for e in events if not (e.check == "S3" and e.repetition == v.rounds and e.role != "solo")]
    s3_only = FairnessConfig(checks=["S3"], **cfg.model_dump(exclude={"checks"}))
    [before] = lane_verdicts(earlier, PLAN, s3_only, True)
    assert before.verdict == "marginal"  # why the runner sent the last pair


def test_the_reports_name_a_marginal_check_beside_the_recommendation():
    from satbench.report.evidence_answer import verdict_summary
    from satbench.report.table import doubts

    marginal = prompt_vs_prompt(_s3([0.0, 20.0, 10.0]), PLAN, CAL, FairnessConfig()).model_copy(
        update={"concurrency": 2})
    summary = verdict_summary(SimpleNamespace(fairness=[marginal]))
    assert summary == ("1 checks: 0 pass, 0 fail, 1 marginal, 0 inconclusive; marginal (does not bind): "
                       "S3 prompt behind prompt at 2 in flight")
    rec = SimpleNamespace(undetermined=None, contended=False, confidence=None,
                          curve_shape="rising from 1 to 4",
                          fairness_marginal=fairness_marginal(SimpleNamespace(fairness=[marginal])),
                          fairness_unverified=[])
    [line] = doubts(rec)
    assert line.startswith("MARGINAL fairness (does not bind) — S3 (prompt behind prompt) marginal at 2")


# -- an unsteady set of references is measured again, and the latest set is judged ---------------

def _alone(sent_ms: float, took_ms: float, rep: int):
    e = ev(sent_ms=sent_ms, chunks_ms=[sent_ms + took_ms / 2, sent_ms + took_ms], seq=0, repetition=rep)
    return _tag(e, "F2", "alone" if rep <= 2 else "alone_again", seq=0, rep=rep)


def test_an_unsteady_set_of_references_is_replaced_by_the_next():
    from satbench.analysis.checks import latest_references, unsteady_references

    first = [_alone(0.0, 215.0, 1), _alone(1000.0, 340.0, 2)]  # 1.58× apart: no reference
    second = [_alone(2000.0, 300.0, 3), _alone(3000.0, 310.0, 4)]
    assert "215.0–340.0 ms in 2 tries" in (unsteady_references("F2", first) or "")
    assert unsteady_references("F2", first + second) is None
    latest = latest_references("F2", first + second)
    assert [(e.repetition, e.role) for e in latest] == [(3, "alone"), (4, "alone")]
    assert latest_references("F2", first) == first  # one set: all of it, as before
    assert unsteady_references("F1", first) is None  # F1 has no lone references


def test_a_failed_reference_is_no_timing_for_the_steadiness_guard():
    from satbench.analysis.checks import unsteady_references

    solo = [_tag(ev(sent_ms=100.0 * i, chunks_ms=[100.0 * i + 20, 100.0 * i + 21]), "S3", "solo", seq=i)
            for i in range(2)]
    failed = _tag(ev(sent_ms=300.0, end_ms=301.0, error="http_error"), "S3", "solo", seq=2)  # no TTFT
    assert unsteady_references("S3", [*solo, failed]) is None
