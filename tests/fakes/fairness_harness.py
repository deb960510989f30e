"""Run one fairness check against the in-process fake llama.cpp server and return its verdict."""

from __future__ import annotations

from satbench.analysis.checks import lane_verdicts
from satbench.analysis.verdicts import Verdict
from satbench.config.schema import FairnessConfig, LaneConfig, RuntimeConfig, ServerParams, WorkloadConfig
from satbench.pipeline import FAIRNESS_JUDGE
from satbench.records.events import RequestEvent
from satbench.records.manifest import ModelInfo
from satbench.run.fairness import FairnessRunner
from satbench.run.lane_session import LaneSession
from satbench.server.remote import UrlRuntime
from satbench.workload.fairness_plan import make_plan
from tests.builders import ListSink
from tests.fakes.fake_llama_server import FakeLlamaServer
from tests.fakes.fake_scheduler import FakeScript

# a fake in the regime the bounds are meant for, as on a real CPU or GPU server: a prefill chunk
# (256 tok × 0.5 ms = 128 ms) far above a decode iteration (6 ms + 1 ms per busy slot)
FAIR = dict(n_slots=4, n_batch=256, n_ctx=4 * 2048, prefill_ms_per_token=0.5, decode_iteration_ms=6.0,
            decode_ms_per_busy_slot=1.0)


class Quiet:
    def begin(self, total_requests: int) -> None: ...
    def level(self, lane: str, scenario: str, level: int, repetition: int) -> None: ...
    def request_done(self, event) -> None: ...
    def skip(self, requests: int) -> None: ...
    def end(self) -> None: ...


async def run_check(check: str, fairness: FairnessConfig | None = None, **script) -> Verdict:
    return (await run_check_events(check, fairness, **script))[0]


async def run_check_events(check: str, fairness: FairnessConfig | None = None,
                           **script) -> tuple[Verdict, list[RequestEvent]]:
    """The check's verdict and the events it was judged on."""
    fake = FakeScript(**{**FAIR, **script})
    fairness = fairness or FairnessConfig()
    async with FakeLlamaServer(fake) as srv:
        lane = LaneConfig(workload=WorkloadConfig(prompt_tokens=32, output_tokens=16),
                          server=ServerParams(n_batch=fake.n_batch), fairness=fairness,
                          runtime=RuntimeConfig(kind="url", model=None, url=srv.base_url))
        session = LaneSession(lane, "fairness", UrlRuntime(srv.base_url), ModelInfo(), None, "t")
        events, samples = ListSink(), ListSink()
        await session.open(samples, None)
        try:
            plan = make_plan(lane, fake.n_slots)
            runner = FairnessRunner(session, plan, events, Quiet(), "t", FAIRNESS_JUDGE)
            await runner.prepare()
            await runner.calibration()
            await runner.check_runs()[check]()
        finally:
            await session.close()
    reqs = [r for r in events.records if isinstance(r, RequestEvent)]
    return next(v for v in lane_verdicts(reqs, plan, fairness, True) if v.check == check), reqs
