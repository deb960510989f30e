"""S1 (decode_stall) judged on a schedule, not on the wall clock: the fake's scheduler runs on a
`VirtualClock` (tests/fakes/scripted_time.Sim), the requests are sent as run/fairness_checks.py sends S1's
(one solo long prompt, then per round the decoders and, once they are steady, the injected prompt),
and the check reads the events those exact timelines make. A busy host cannot move a figure here."""

from __future__ import annotations

import pytest

from satbench.analysis.starvation_checks import decode_stall
from satbench.analysis.verdicts import Calibration
from satbench.config.schema import FairnessConfig, LaneConfig, RuntimeConfig, ServerParams, WorkloadConfig
from satbench.records.events import RequestEvent
from satbench.run.fairness_checks import WATCH_TOKENS
from satbench.workload.fairness_plan import S1_REFERENCES, FairnessPlan, make_plan
from tests.fakes.fairness_harness import FAIR
from tests.fakes.fake_scheduler import FakeRequest
from tests.fakes.fake_script import FakeScript
from tests.fakes.scripted_time import Sim


def _event(req: FakeRequest, role: str, rep: int, stream: int, plan: FairnessPlan) -> RequestEvent:
    chunks = [(t, 1) for t in req.chunk_ns]
    return RequestEvent(lane="l", scenario="fairness", level=plan.s1_decoders + 1, repetition=rep,
                        stream=stream, seq=0, phase="measured", request_id=req.rid,
                        prompt_tokens=req.prompt_n, max_tokens=req.n_predict, targeted_ns=req.arrival_ns,
                        sent_ns=req.arrival_ns, headers_ns=req.arrival_ns, end_ns=req.end_ns,
                        chunks=chunks, output_tokens=len(chunks), check="S1", role=role)


def _s1_events(script: FakeScript, plan: FairnessPlan, rounds: int) -> list[RequestEvent]:
    """S1's requests on the virtual clock: each round on a fresh (idle) server, as the runner's
    rounds follow one another once the last request of the one before has ended."""
    sim = Sim(script)
    solos = [sim.send(0.0, f"solo{i}", plan.s1_prompt, 4) for i in range(S1_REFERENCES)]
    sim.run()
    events = [_event(r, "solo", 1, 0, plan) for r in solos]
    for rep in range(1, rounds + 1):
        sim = Sim(script)
        decoders = [sim.send(0.0, f"dec{rep}-{i}", plan.prompt, plan.s1_decoder_output)
                    for i in range(plan.s1_decoders)]
        watched_ms = 0.0
        while min(len(d.chunk_ns) for d in decoders) < WATCH_TOKENS:  # the runner watches, then sends
            watched_ms += 1.0
            sim.run(until_ms=watched_ms)
        injected = sim.send(sim.now_ms, f"injected{rep}", plan.s1_prompt, 4)
        sim.run()
        events += [_event(d, "decoder", rep, i, plan) for i, d in enumerate(decoders)]
        events.append(_event(injected, "injected", rep, plan.s1_decoders, plan))
    return events


def _verdict(prefill_chunk_factor: float):
    script = FakeScript(**FAIR, prefill_chunk_factor=prefill_chunk_factor)
    lane = LaneConfig(workload=WorkloadConfig(prompt_tokens=32, output_tokens=16),
                      server=ServerParams(n_batch=script.n_batch),
                      runtime=RuntimeConfig(kind="url", model=None, url="http://127.0.0.1:1"))
    plan, cfg = make_plan(lane, script.n_slots), FairnessConfig()
    events = _s1_events(script, plan, cfg.rounds("S1")[0])
    return decode_stall(events, plan, Calibration(prefill_tok_per_s=None, decode_iteration_ms=None), cfg)


def test_a_chunked_prefill_passes_s1_on_the_virtual_clock():
    v = _verdict(1.0)
    assert v.verdict == "pass", v
    itl = next(s for s in v.statistics if s.name == "max_itl_ms")
    # one n_batch chunk (256 tok × 0.5 ms, less the decoders' tokens) plus a decode iteration: exactly
    assert itl.estimate == pytest.approx((256 - 3) * 0.5 + 6.0 + 3 * 1.0)


def test_a_prefill_that_holds_the_decoders_fails_s1_on_the_virtual_clock():
    # ⌊3·n_batch⌋ − K prompt tokens in an iteration with decode tokens: 1.5 is the bound
    v = _verdict(3.0)
    assert v.verdict == "fail", v
    itl = next(s for s in v.statistics if s.name == "max_itl_ms")
    assert itl.estimate > itl.bound


def test_the_same_script_judges_the_same_every_time():
    assert _verdict(3.0) == _verdict(3.0)
