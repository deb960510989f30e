"""Inconclusive, never a silent pass: too few slots, a foreign server, requests that failed."""

from satbench.config import FairnessConfig, LaneConfig, ServerParams, WorkloadConfig
from satbench.fairness.plan import make_plan
from satbench.fairness.verdicts import lane_verdicts, s1, s2
from satbench.fairness.verdicts import Calibration
from tests.builders import ev
from tests.fairness.harness import run_check


async def test_one_slot_cannot_show_fairness_between_requests():
    v = await run_check("F1", n_slots=1)
    assert v.verdict == "inconclusive" and "at least 2 slots" in v.reason


def test_a_server_that_is_not_llamacpp_gets_inconclusive_everywhere():
    lane = LaneConfig()
    verdicts = lane_verdicts([], make_plan(lane, 4), lane.fairness, llamacpp=False)
    assert [v.verdict for v in verdicts] == ["inconclusive"] * 6
    assert all("not llama.cpp" in v.reason for v in verdicts)


def test_failed_requests_make_a_check_inconclusive():
    lane = LaneConfig(workload=WorkloadConfig(prompt_tokens=32, output_tokens=16), server=ServerParams(n_batch=256))
    plan = make_plan(lane, 4)
    events = [ev(sent_ms=0, chunks_ms=[10, 20], error="http_400")]
    for e in events:
        e.check, e.role = "S1", "injected"
    v = s1(events, plan, Calibration(prefill_tok_per_s=1000.0, decode_iteration_ms=5.0), FairnessConfig())
    assert v.verdict == "inconclusive" and "http_400" in v.reason


def test_a_context_too_small_for_a_long_prompt_is_inconclusive():
    lane = LaneConfig(server=ServerParams(n_batch=2048))
    plan = make_plan(lane, 4, per_slot_ctx=2048)  # fits no prompt ≫ n_batch
    v = s1([], plan, Calibration(prefill_tok_per_s=1000.0, decode_iteration_ms=5.0), FairnessConfig())
    assert v.verdict == "inconclusive" and "per-slot context" in v.reason


def test_iterations_below_the_clients_resolution_are_inconclusive():
    lane = LaneConfig(workload=WorkloadConfig(prompt_tokens=32, output_tokens=16))
    plan = make_plan(lane, 4)
    dec = ev(stream=0, sent_ms=0, chunks_ms=[0.1 * k for k in range(1, 200)])  # 0.1 ms iterations
    probe = ev(stream=1, sent_ms=5, chunks_ms=[5.5, 5.6])
    solo = ev(stream=2, sent_ms=30, chunks_ms=[30.4, 30.5])
    for e, role in ((dec, "decoder"), (probe, "probe"), (solo, "solo")):
        e.check, e.role = "S2", role
    v = s2([dec, probe, solo], plan, FairnessConfig())
    assert v.verdict == "inconclusive" and "resolves" in v.reason
