"""Inconclusive, never a silent pass: too few slots, a foreign server, requests that failed."""

from satbench.analysis.checks import lane_verdicts
from satbench.analysis.starvation_checks import decode_stall, prompt_admission
from satbench.analysis.verdicts import Calibration
from satbench.config.schema import FairnessConfig, LaneConfig, ServerParams, WorkloadConfig
from satbench.workload.fairness_plan import make_plan
from tests.builders import ev
from tests.fakes.fairness_harness import run_check


async def test_one_slot_cannot_show_fairness_between_requests():
    v = await run_check("F1", n_slots=1)
    assert v.verdict == "inconclusive" and "at least 2 slots" in v.reason


def test_a_server_that_is_not_llamacpp_gets_inconclusive_everywhere():
    lane = LaneConfig()
    verdicts = lane_verdicts([], make_plan(lane, 4), lane.fairness, llamacpp=False)
    assert [v.verdict for v in verdicts] == ["inconclusive"] * 6
    assert all("not llama.cpp" in v.reason for v in verdicts)


def test_failed_requests_make_a_check_inconclusive():
    lane = LaneConfig(workload=WorkloadConfig(prompt_tokens=32, output_tokens=16),
                      server=ServerParams(n_batch=256))
    plan = make_plan(lane, 4)
    events = [ev(sent_ms=0, chunks_ms=[10, 20], error="http_400").model_copy(
        update={"check": "S1", "role": "injected"})]
    v = decode_stall(events, plan, Calibration(prefill_tok_per_s=1000.0, decode_iteration_ms=5.0),
                     FairnessConfig())
    assert v.verdict == "inconclusive" and "http_400" in v.reason


def test_a_context_too_small_for_a_long_prompt_is_inconclusive():
    lane = LaneConfig(server=ServerParams(n_batch=2048))
    plan = make_plan(lane, 4, per_slot_ctx=2048)  # fits no prompt ≫ n_batch
    v = decode_stall([], plan, Calibration(prefill_tok_per_s=1000.0, decode_iteration_ms=5.0),
                     FairnessConfig())
    assert v.verdict == "inconclusive" and "per-slot context" in v.reason


def test_iterations_below_the_clients_resolution_are_inconclusive():
    lane = LaneConfig(workload=WorkloadConfig(prompt_tokens=32, output_tokens=16))
    plan = make_plan(lane, 4)
    dec = ev(stream=0, sent_ms=0, chunks_ms=[0.1 * k for k in range(1, 200)])  # 0.1 ms iterations
    probe = ev(stream=1, sent_ms=5, chunks_ms=[5.5, 5.6])
    solo = ev(stream=2, sent_ms=30, chunks_ms=[30.4, 30.5])
    dec, probe, solo = (e.model_copy(update={"check": "S2", "role": role})
                        for e, role in ((dec, "decoder"), (probe, "probe"), (solo, "solo")))
    v = prompt_admission([dec, probe, solo], plan, FairnessConfig())
    assert v.verdict == "inconclusive" and "resolves" in v.reason


def _tag(e, check: str, role: str, *, stream: int = 0, seq: int = 0, rep: int = 1):
    return e.model_copy(update={"check": check, "role": role, "stream": stream, "seq": seq, "repetition": rep,
                                "scenario": "fairness"})


def test_a_pair_cut_in_half_by_an_interrupted_run_is_left_out_of_s3():
    """A run stopped between the two sends of an S3 pair leaves its 'first' alone: the verdict
    is judged on the complete pairs (it used to raise KeyError and lose results.json)."""
    lane = LaneConfig(fairness=FairnessConfig(checks=["S3"]))
    evs = [_tag(ev(sent_ms=0, chunks_ms=[5, 6, 7]), "CAL", "prefill"),
           _tag(ev(sent_ms=10, chunks_ms=[12, 14, 16, 18]), "CAL", "decode")]
    evs += [_tag(ev(seq=i, sent_ms=100 + 50 * i, chunks_ms=[120 + 50 * i, 122 + 50 * i]), "S3", "solo", seq=i)
            for i in range(3)]
    evs.append(_tag(ev(sent_ms=400, chunks_ms=[420, 422]), "S3", "first", rep=1))
    evs.append(_tag(ev(sent_ms=410, chunks_ms=[445, 447]), "S3", "second", rep=1, stream=1))
    evs.append(_tag(ev(sent_ms=500, chunks_ms=[520, 522]), "S3", "first", rep=2))  # its second never sent
    [v] = lane_verdicts(evs, make_plan(lane, 4), lane.fairness, llamacpp=True)
    assert v.verdict == "marginal" and v.samples == 1  # judged on the one complete pair: no CI from one
    only_half = [e for e in evs
                 if not (e.check == "S3" and e.repetition == 1 and e.role in ("first", "second"))]
    [v] = lane_verdicts(only_half, make_plan(lane, 4), lane.fairness, llamacpp=True)
    assert v.verdict == "inconclusive" and "complete pair" in v.reason


def _s2_events(delays_ms: list[float]):
    evs = [_tag(ev(sent_ms=100 * i, chunks_ms=[10 + 100 * i, 20 + 100 * i]), "S2", "solo", seq=i)
           for i in range(3)]
    for d in range(3):  # three decoders, a token every 10 ms from t = 1000 to 3000 ms
        evs.append(_tag(ev(sent_ms=990, chunks_ms=[1000 + 10 * k for k in range(201)]), "S2", "decoder",
                        stream=d, seq=d))
    for i, late in enumerate(delays_ms):
        t = 1100 + 120 * i
        evs.append(_tag(ev(sent_ms=t, chunks_ms=[t + 10 + late, t + 12 + late]), "S2", "probe",
                        stream=3, seq=i))
    return evs


def test_s2_judges_the_median_delay_of_its_probes():
    """Every probe held: fail. One late probe of fifteen (client noise) does not move the median:
    pass. Two held of five: the CI cannot tell (marginal), so the runner would send more probes."""
    lane = LaneConfig(fairness=FairnessConfig(checks=["S2"]))
    plan = make_plan(lane, 4)
    held = prompt_admission(_s2_events([200] * 5), plan, lane.fairness)
    assert held.verdict == "fail" and held.statistics[0].ci_low > held.statistics[0].bound
    one_late = prompt_admission(_s2_events([0] * 14 + [200]), plan, lane.fairness)
    assert one_late.verdict == "pass" and one_late.measured["probes_over_bound"] == 1.0
    two_held = prompt_admission(_s2_events([0, 0, 0, 200, 200]), plan, lane.fairness)
    assert two_held.verdict == "marginal", two_held.statistics


def test_s1_p99_interpolates_instead_of_reporting_the_maximum():
    lane = LaneConfig(workload=WorkloadConfig(prompt_tokens=32, output_tokens=16),
                      server=ServerParams(n_batch=256))
    plan = make_plan(lane, 4)
    solo = _tag(ev(sent_ms=0, chunks_ms=[100, 101], prompt_n=1024, prompt_ms=100), "S1", "solo")
    inj = _tag(ev(sent_ms=1000, chunks_ms=[1200, 1201], prompt_n=1024), "S1", "injected", stream=1)
    inj = inj.model_copy(update={"prompt_tokens": 1024})
    # a decoder: 10 ms gaps before the injection; during it 50 gaps of 2 ms and one of 100 ms
    before = [900 + 10 * k for k in range(11)]
    during = [1000 + 2 * k for k in range(1, 51)]
    dec = _tag(ev(sent_ms=890, chunks_ms=before + during + [during[-1] + 100]), "S1", "decoder", stream=2)
    v = decode_stall([solo, inj, dec], plan.model_copy(update={"s1_prompt": 1024}),
           Calibration(prefill_tok_per_s=10000.0, decode_iteration_ms=10.0), FairnessConfig())
    assert v.statistics[0].name == "max_itl_ms" and v.statistics[0].estimate == 100.0
    assert 2.0 < v.measured["p99_itl_ms"] < 100.0
