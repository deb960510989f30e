"""The requests of the fairness checks on one lane's server (`CheckTraffic`): each built with a short
unique id, sent alone, beside others or as a closed-loop level, and recorded as a raw event (scenario
"fairness", tagged with its check, role and round as `repetition`), a copy kept for the verdicts so far.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Sequence
from typing import Protocol

from satbench.config.schema import CheckName, FairnessConfig, WorkloadConfig
from satbench.http.client import CompletionRequest, StreamOutcome
from satbench.load.liveness import StreamActivity
from satbench.load.loadgen import LevelPlan, run_level, run_recorded, to_event
from satbench.records.events import RequestEvent
from satbench.records.writer import JsonlWriter
from satbench.run.lane_session import LaneSession, Progress
from satbench.workload.builder import WorkloadBuilder
from satbench.workload.fairness_plan import FairnessPlan


class FairnessJudge(Protocol):
    """What the runner asks of the deriving side (satbench.pipeline provides it)."""

    def verdict(self, check: CheckName, events: Sequence[RequestEvent], plan: FairnessPlan,
                cfg: FairnessConfig) -> str:
        """The check's verdict kind (pass, fail, marginal, inconclusive) from the events so far."""

    def prefill_tok_per_s(self, calibration: Sequence[RequestEvent]) -> float | None:
        """The lane's prefill rate from its calibration requests, as the verdicts read it."""

    def references_unsteady(self, check: CheckName, events: Sequence[RequestEvent]) -> bool:
        """Whether the check's latest lone references are too far apart to serve as its reference."""


class _Kept:
    """The run's events file, keeping a copy of the request events written (the verdicts so far)."""

    def __init__(self, sink: JsonlWriter, kept: list[RequestEvent]) -> None:
        self.sink, self.kept = sink, kept

    def write(self, record) -> None:
        self.sink.write(record)
        if isinstance(record, RequestEvent):
            self.kept.append(record)

    def close(self) -> None:
        self.sink.close()


class CheckTraffic:
    """The fairness checks' requests on `session`'s server, sized by `plan`; `events`: this session's
    fairness events, as written (what `judge` reads); `activity`: the running check's requests (its
    watchdog's view)."""

    def __init__(self, session: LaneSession, plan: FairnessPlan, sink: JsonlWriter, progress: Progress,
                 nonce: str, judge: FairnessJudge) -> None:
        self.s, self.plan, self.progress, self.judge = session, plan, progress, judge
        self.events: list[RequestEvent] = []
        self.sink = _Kept(sink, self.events)
        self.lane = session.lane.name
        self.nonce = nonce
        self.builder: WorkloadBuilder | None = None
        self.activity: StreamActivity | None = None
        self._spawned: set[asyncio.Task] = set()

    def spawn(self, coro: Coroutine[object, object, RequestEvent]) -> asyncio.Task:
        """A request sent beside others; one left when its check stops is stopped (and recorded) with it."""
        task = asyncio.create_task(coro)
        self._spawned.add(task)
        task.add_done_callback(self._spawned.discard)
        return task

    async def stop_spawned(self) -> None:
        left = list(self._spawned)
        for task in left:
            task.cancel()
        await asyncio.gather(*left, return_exceptions=True)

    async def prepare(self) -> None:
        assert self.s.workload is not None
        # the lane's tokenizer and endpoint, but always unique prefixes, no prompt cache and the plan's
        # fixed sizes (a lane whose lengths are drawn gives the plan its means: fairness_plan.py)
        cfg = WorkloadConfig(prompt_tokens=self.plan.prompt, output_tokens=self.plan.output,
                             endpoint=self.s.lane.workload.endpoint)
        self.builder = self.s.workload.derive(cfg, self.nonce)
        await self.builder.prepare()

    async def req(self, check: str, role: str, seq: int, prompt: int, output: int) -> CompletionRequest:
        """A request whose id (and unique prompt prefix) is short: nonce, check, role, number.
        A prompt too short for that prefix grows to fit (the event records its real length)."""
        assert self.builder is not None
        return await self.builder.one(f"{self.nonce}{check}{role}{seq}", prompt, output, grow=True)

    def _level_plan(self, check: str, level: int, rep: int, warmup=(), measured=()) -> LevelPlan:
        return LevelPlan(lane=self.lane, level=level, repetition=rep, warmup=list(warmup),
                         measured=list(measured), scenario="fairness", check=check,
                         session=self.s.session_index)

    async def send(self, check: str, role: str, seq: int, req: CompletionRequest, *, level: int = 1,
                   rep: int = 1, stream: int = 0, out: StreamOutcome | None = None) -> RequestEvent:
        assert self.s.client is not None
        targeted = time.perf_counter_ns()
        plan = self._level_plan(check, level, rep)
        event = await run_recorded(self.s.client, req,
                                   lambda o: to_event(plan, stream, seq, "measured", req, targeted, o,
                                                      role=role),
                                   self.sink, out=out, activity=self.activity)
        self.progress.request_done(event)
        return event

    async def closed_loop(self, check: str, streams: int, per_stream: int, prompt: int, output: int,
                          rep: int, stagger_s: float = 0.0) -> None:
        assert self.s.client is not None
        warm = [await self.req(check, f"warmup{rep}-", i, prompt, output) for i in range(streams)]
        meas = [await self.req(check, f"measured{rep}-", i, prompt, output)
                for i in range(streams * per_stream)]
        self.progress.level(self.lane, f"fairness {check}", streams, rep)
        await run_level(self.s.client, self._level_plan(check, streams, rep, warm, meas), self.sink,
                        on_done=self.progress.request_done, activity=self.activity,
                        start_offsets_s=[i * stagger_s for i in range(streams)] if stagger_s else None)

    async def decoders(self, check: str, n: int, output: int,
                       rep: int) -> tuple[list[StreamOutcome], list[asyncio.Task]]:
        outs = [StreamOutcome() for _ in range(n)]
        reqs = [await self.req(check, f"decoder{rep}-", i, self.plan.prompt, output) for i in range(n)]
        tasks = [self.spawn(self.send(check, "decoder", i, r, level=n, rep=rep, stream=i, out=o))
                 for i, (r, o) in enumerate(zip(reqs, outs, strict=True))]
        return outs, tasks


POLL_S = 0.002  # wait_for_tokens looks at the watched streams this often


async def wait_for_tokens(outs: list[StreamOutcome], tokens: int, timeout_s: float = 120.0) -> None:
    """Wait until every watched stream has received `tokens` tokens (or finished)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(o.output_tokens >= tokens or o.end_ns for o in outs):
            return
        await asyncio.sleep(POLL_S)
