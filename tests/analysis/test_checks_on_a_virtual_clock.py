"""Every fairness check judged on a schedule, not on the wall clock: the fake's scheduler runs on a
`VirtualClock` (tests/fakes/scripted_time.Sim), the requests are sent as the runner sends them
(tests/fakes/virtual_fairness: the calibration, then each check's references and rounds), and the check
function reads the events those exact timelines make. A busy host cannot move a figure here.

Each check passes on the fair script and fails on its graded knob (tests/fakes/fake_script.py), and its
statistic is asserted exactly where the script's arithmetic gives it (fake_scheduler's docstring states
the true values). The wall-clock tests (test_verdicts_can_fail.py and the others) are the integration path.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import pytest

from satbench.analysis.fairness_checks import backlogged_clients, equal_requests, mixed_sizes
from satbench.analysis.starvation_checks import decode_stall, prompt_admission, prompt_vs_prompt
from satbench.analysis.verdicts import Verdict
from satbench.records.events import RequestEvent
from satbench.run.fairness_checks import PAIR_GAP_S
from tests.fakes import virtual_fairness as vf
from tests.fakes.fairness_harness import FAIR
from tests.fakes.scripted_time import MS, f2_slowdowns

P_MS = FAIR["prefill_ms_per_token"]  # ms per prompt token
NS = 1e-6  # ms: one ns of deadline rounding


def t_ms(k: int) -> float:
    """FAIR's decode ms of an iteration with k generating slots: T(k)."""
    return FAIR["decode_iteration_ms"] + k * FAIR["decode_ms_per_busy_slot"]


Judge = Callable[[list[RequestEvent], vf.Lane], Verdict]
CHECKS: dict[str, tuple[Callable[[vf.Lane], vf.Traffic], Judge]] = {
    "F1": (vf.equal_requests, lambda ev, ln: equal_requests(ev, ln.plan, ln.cal, ln.cfg)),
    "F2": (vf.mixed_sizes, lambda ev, ln: mixed_sizes(ev, ln.plan, ln.cfg)),
    "F3": (vf.backlogged_clients, lambda ev, ln: backlogged_clients(ev, ln.plan, ln.cfg)),
    "S1": (vf.decode_stall, lambda ev, ln: decode_stall(ev, ln.plan, ln.cal, ln.cfg)),
    "S2": (vf.prompt_admission, lambda ev, ln: prompt_admission(ev, ln.plan, ln.cfg)),
    "S3": (vf.prompt_vs_prompt, lambda ev, ln: prompt_vs_prompt(ev, ln.plan, ln.cal, ln.cfg)),
}
UNFAIR: dict[str, dict[str, Any]] = {  # each check's graded knob at a degree past its bound
    "F1": {"slow_slots": [1], "slow_slot_rate": 0.5},
    "F2": {"slow_slots": [3], "slow_slot_rate": 0.3},
    "F3": {"lifo_share": 1.0},
    "S1": {"prefill_chunk_factor": 3.0},
    "S2": {"admit_delay_iterations": 2.0},
    "S3": {"second_prompt_delay_iterations": 2.0},
}


def judged(check: str, **knobs) -> tuple[Verdict, vf.Lane, vf.Traffic]:
    """The check's verdict on its workload sent on a Sim of FAIR with `knobs`, its lane and traffic."""
    send, judge = CHECKS[check]
    ln = vf.lane(**knobs)
    t = send(ln)
    return judge(t.events(), ln), ln, t


def stat(v: Verdict, name: str):
    return next(s for s in v.statistics if s.name == name)


def test_the_calibration_measures_the_scripts_rates():
    ln = vf.lane()
    assert ln.cal.prefill_tok_per_s == pytest.approx(1000 / P_MS)
    assert ln.cal.decode_iteration_ms == ln.lone_itl_ms == pytest.approx(t_ms(1))


# -- F1: slow_slots / slow_slot_rate ---------------------------------------------------------------
def test_f1_equal_streams_get_equal_service():
    v, _, _ = judged("F1")
    assert v.verdict == "pass", v
    assert stat(v, "service_ratio").estimate == 1.0 and v.measured["jain_index"] == 1.0


@pytest.mark.parametrize("rate, verdict", [(11 / 12, "pass"), (1 / 1.2, "fail"), (0.5, "fail")])
def test_f1_a_slow_slot_gives_the_service_ratio_one_over_its_rate(rate, verdict):
    # true per-stream decode-rate ratio 1/r; the pooled token counts carry ⌊n·r⌋ and the +1: within 1 %
    v, _, _ = judged("F1", slow_slots=[1], slow_slot_rate=rate)
    assert v.verdict == verdict, v
    ratio = stat(v, "service_ratio")
    assert ratio.estimate == pytest.approx(1 / rate, rel=0.01)
    assert ratio.bound == 1.10


# -- F2: slow_slots=[N − 1] / slow_slot_rate -------------------------------------------------------
@pytest.mark.parametrize("knobs, verdict", [({}, "pass"), (UNFAIR["F2"], "fail")])
def test_f2_max_slowdown_is_the_scripts_slowdown(knobs, verdict):
    v, ln, _ = judged("F2", **knobs)
    assert v.verdict == verdict, v
    true = f2_slowdowns(ln.script, ln.plan.f2_sizes, gap_ms=vf.SEND_GAP_MS)
    assert stat(v, "max_slowdown").estimate == pytest.approx(max(true), abs=1e-9)
    assert stat(v, "max_slowdown").bound == pytest.approx(1.1 * len(ln.plan.f2_sizes))
    assert [v.measured[f"slowdown_size{i}"] for i in range(len(true))] == pytest.approx(true, abs=1e-9)


# -- F3: lifo_share --------------------------------------------------------------------------------
def test_f3_fifo_serves_the_clients_round_robin():
    v, _, _ = judged("F3")
    assert v.verdict == "pass", v
    # equal requests taken in turn: no client is ever more than one request ahead of another
    assert stat(v, "service_gap_p90_costliest").estimate == 1.0
    assert v.measured["max_service_gap_costliest"] == 1.0 and v.measured["backlogged_share"] == 1.0


def test_f3_the_newest_waiter_first_starves_a_client():
    v, _, _ = judged("F3", **UNFAIR["F3"])
    assert v.verdict == "fail", v
    drift = stat(v, "gap_drift_costliest_per_cycle")  # the starved client's gap grows every cycle
    assert drift.decision == "fail" and drift.ci_low is not None and drift.ci_low > drift.bound


# -- S1: prefill_chunk_factor ----------------------------------------------------------------------
def test_s1_a_chunked_prefill_passes():
    v, ln, _ = judged("S1")
    assert v.verdict == "pass", v
    k, n_batch = ln.plan.s1_decoders, ln.plan.n_batch
    # one n_batch chunk less the decoders' tokens, plus a decode iteration of K: exactly
    assert stat(v, "max_itl_ms").estimate == pytest.approx((n_batch - k) * P_MS + t_ms(k))


def test_s1_a_prefill_that_holds_the_decoders_fails():
    v, ln, _ = judged("S1", **UNFAIR["S1"])
    assert v.verdict == "fail", v
    k, n_batch, prompt = ln.plan.s1_decoders, ln.plan.n_batch, ln.plan.s1_prompt
    itl = stat(v, "max_itl_ms")
    # ⌊3·n_batch⌋ − K tokens fit the whole injected prompt: one iteration holds all of it
    assert 3 * n_batch - k >= prompt and itl.estimate == pytest.approx(prompt * P_MS + t_ms(k))
    assert itl.bound == pytest.approx(1.5 * n_batch * P_MS + t_ms(k))  # 1.5 batches + the baseline


# -- S2: admit_delay_iterations --------------------------------------------------------------------
@pytest.mark.parametrize("delay, verdict", [(0.0, "pass"), (UNFAIR["S2"]["admit_delay_iterations"], "fail")])
def test_s2_admission_delay_is_the_rest_of_the_iteration_and_d_plus_one_more(delay, verdict):
    v, ln, t = judged("S2", admit_delay_iterations=delay)
    assert v.verdict == verdict, v
    k = ln.plan.s2_decoders
    decoders = t.requests("decoder")
    true = []
    for probe, tags in t.requests("probe"):
        mine = [d for d, dt in decoders if dt["rep"] == tags["rep"]]
        ends = [c for d in mine for c in d.chunk_ns if c > probe.arrival_ns]
        rest_ms = (min(ends) - probe.arrival_ns) / MS  # of the iteration the probe came in
        true.append(rest_ms + (1 + delay) * t_ms(k))
    delay_p50 = stat(v, "admission_delay_p50_ms")
    assert delay_p50.estimate == pytest.approx(statistics.median(true), abs=NS)
    assert delay_p50.bound == pytest.approx(2 * t_ms(k))


# -- S3: second_prompt_delay_iterations ------------------------------------------------------------
@pytest.mark.parametrize("delay, verdict",
                         [(0.0, "pass"), (UNFAIR["S3"]["second_prompt_delay_iterations"], "fail")])
def test_s3_second_wait_grows_by_d_lone_iterations(delay, verdict):
    v, ln, t = judged("S3", second_prompt_delay_iterations=delay)
    assert v.verdict == verdict, v
    assert {r.prompt_n for r, _ in t.requests("first") + t.requests("second")} == {ln.plan.n_batch}
    # n_batch-token prompts: the second's prefill is split around one decode of the first, and its own
    # first token takes another; less the gap it came after the first, plus d·T(1)
    fair = 2 * t_ms(1) - PAIR_GAP_S * 1000
    wait = stat(v, "second_wait_ms")
    assert wait.estimate == pytest.approx(fair + delay * t_ms(1), abs=NS)
    assert wait.bound == pytest.approx(2 * t_ms(1))


# -- determinism -----------------------------------------------------------------------------------
@pytest.mark.parametrize("check", list(CHECKS))
def test_the_same_script_judges_the_same_every_time(check):
    assert judged(check, **UNFAIR[check])[0] == judged(check, **UNFAIR[check])[0]
