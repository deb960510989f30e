"""Level plans run on one lane session's open server (`LevelRunner`): a closed-loop level or an
open-loop rate, between two sampler snapshots, under the liveness watchdog (run.watch); and the
together scenario's step, the k-th level of every lane at once (`together_step`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine

from satbench.errors import LevelFailedError, SatbenchError
from satbench.http.errors import RequestFailed
from satbench.load.liveness import ServerUnresponsive, StreamActivity, prefill_ms_per_token
from satbench.load.loadgen import UNREACHABLE, LevelPlan, run_level
from satbench.load.open_loop import OpenPlan, open_seed, run_open
from satbench.records.events import LevelMark, RequestEvent
from satbench.records.writer import JsonlWriter
from satbench.run.lane_session import LaneSession, Progress
from satbench.workload.builder import BACKGROUND_POOL_PER_STREAM

Load = Callable[[Callable[[RequestEvent], None], StreamActivity], Coroutine[object, object, LevelMark]]


class LevelRunner:
    """The levels of one opened lane session (`session`): each plan built by its workload, run by
    its client, recorded to the events file given; a level that lost the server raises
    LevelFailedError (what finished is on disk)."""

    def __init__(self, session: LaneSession) -> None:
        self.s = session

    async def plan(self, level: int, repetition: int, background: bool, warmup: bool = True,
                   measured: int | None = None) -> LevelPlan:
        """The level's requests (tokenized by the server): `measured` of them (None: the lane's own
        count), its warmup requests only with `warmup`; LevelFailedError if the server is gone."""
        try:
            return await self._plan(level, repetition, background, warmup, measured)
        except (SatbenchError, RequestFailed) as exc:
            await self.s.watch.check_alive(f"level {level} (repetition {repetition})", level, repetition, exc)
            raise

    async def _plan(self, level: int, repetition: int, background: bool, warmup: bool = True,
                    measured: int | None = None) -> LevelPlan:
        assert self.s.workload is not None
        lane, name = self.s.lane, self.s.id_name
        build = self.s.trace.build if self.s.trace is not None else self.s.workload.build  # trace: cycled
        return LevelPlan(
            lane=lane.name, level=level, repetition=repetition, scenario=self.s.scenario,
            session=self.s.session_index,
            warmup=(await build(name, level, repetition, "warmup", level * lane.warmup_per_stream)
                    if warmup else []),
            measured=await build(name, level, repetition, "measured",
                                 measured or lane.measured_requests(level)),
            background=(await build(name, level, repetition, "background",
                                    level * BACKGROUND_POOL_PER_STREAM) if background else []),
        )

    async def run(self, plan: LevelPlan, sink: JsonlWriter, progress: Progress,
                  keep_busy: asyncio.Event | None = None,
                  measured_done: asyncio.Event | None = None) -> LevelMark:
        """One level repetition; raises LevelFailedError if it failed (what finished is on disk),
        also when the liveness watchdog declared the server failed (liveness.py: silent for
        `liveness_timeout_s` while requests are in flight, or its process gone)."""
        assert self.s.client is not None
        client = self.s.client
        told = measured_done.set if measured_done is not None else None
        return await self._drive(plan, progress, lambda done, activity: run_level(
            client, plan, sink, on_done=done, keep_busy=keep_busy, measured_done=told, activity=activity))

    async def run_open(self, rate_index: int, repetition: int, seed: int, sink: JsonlWriter,
                       progress: Progress) -> LevelMark:
        """The lane's `rate_index`-th open-loop rate (1-based), once (load/open_loop.py), under the
        liveness watchdog; LevelFailedError if it lost the server (what finished is on disk). A trace
        lane's one rate is its replay: the trace's requests at the trace's arrivals."""
        s = self.s
        assert s.client is not None and s.workload is not None
        assert s.facts is not None and s.lane.rates is not None
        lane, rate, client = s.lane, s.lane.rates[rate_index - 1], s.client
        if s.trace is not None:  # a replayed trace: its requests at its own arrivals
            reqs, offsets = await s.trace.build_open(s.id_name, rate_index, repetition), s.trace.offsets_ns
        else:
            n = lane.arrivals_per_rate(rate)
            reqs, offsets = await s.workload.build_open(s.id_name, rate_index, repetition, n), None
        plan = OpenPlan(LevelPlan(lane=lane.name, level=rate_index, repetition=repetition, warmup=[],
                                  measured=reqs, scenario="open", session=s.session_index),
                        rate, lane.open_cap(s.facts.total_slots or 1),
                        open_seed(seed, rate_index, repetition), offsets)
        return await self._drive(plan.level, progress, lambda done, activity: run_open(
            client, plan, sink, on_done=done, activity=activity))

    async def _drive(self, plan: LevelPlan, progress: Progress, load: Load) -> LevelMark:
        """Run `load(on_done, activity)` (a closed- or open-loop level) between two sampler snapshots,
        under the liveness watchdog; LevelFailedError when it failed, its server is gone, or the server
        no longer answers after a last request that could not reach it."""
        watch, runtime = self.s.watch, self.s.runtime
        sampler = watch.sampler
        assert sampler is not None
        progress.level(self.s.lane.name, plan.scenario, plan.level, plan.repetition)
        await sampler.snapshot()
        last: list[RequestEvent] = []

        def done(event: RequestEvent) -> None:
            last[:] = [event]
            if (ms := prefill_ms_per_token(event)) is not None:
                watch.prefill_ms_per_token = max(ms, watch.prefill_ms_per_token or 0.0)
            progress.request_done(event)

        activity = StreamActivity()
        try:
            end = await watch.watched(load(done, activity), activity)
        except ServerUnresponsive as exc:  # the level is on disk, failed, its requests in flight recorded
            raise self._level_failed(plan, watch.why_unresponsive(exc)) from None
        await sampler.snapshot()
        sampler.check_written()  # server_samples.jsonl unwritable (disk full): stop, say so
        # a level can end on unreachable failures too few for run_level's "N + 3 in a row": ask the server
        tail = last[0].error if last and last[0].error and last[0].error.type in UNREACHABLE else None
        silent = tail is not None and end.status != "failed" and not await watch.answers()
        if end.status == "failed" or not runtime.alive() or silent:
            if not runtime.alive():
                why = watch.exit_words()
            elif silent and tail is not None:
                why = f"the server stopped answering (last request: {tail.type}: {tail.message})"
            else:
                why = str(end.reason)
            raise self._level_failed(plan, why)
        return end

    def _level_failed(self, plan: LevelPlan, why: str) -> LevelFailedError:
        lane = self.s.lane
        what = (f"rate {lane.rates[plan.level - 1]:g}/s" if plan.scenario == "open" and lane.rates
                else f"level {plan.level}")
        return LevelFailedError(f"lane {lane.name}: {what} (repetition "
                                f"{plan.repetition}{', together' if self.s.scenario == 'together' else ''}) "
                                f"failed: {why}", lane=lane.name, scenario=plan.scenario,
                                level=plan.level, repetition=plan.repetition)


async def together_step(active: list[LaneSession], k: int, rep: int, events: JsonlWriter,
                        progress: Progress) -> None:
    """The k-th level of every active lane at once: each lane's streams stay busy with background
    requests until every lane has its measured requests, so each is measured under the others'
    full load; one lane's failure stops the others' levels too (their marks say so)."""
    keep_busy = asyncio.Event()
    done = [asyncio.Event() for _ in active]
    runners = [LevelRunner(s) for s in active]
    plans = [await r.plan(r.s.lane.levels[k], rep, background=True) for r in runners]

    async def release_when_all_measured() -> None:
        await asyncio.gather(*(d.wait() for d in done))
        keep_busy.set()

    releaser = asyncio.create_task(release_when_all_measured())
    tasks = [asyncio.create_task(r.run(p, events, progress, keep_busy=keep_busy, measured_done=d))
             for r, p, d in zip(runners, plans, done)]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        failed = next((s.lane.name for s, t in zip(active, tasks) if t.done() and not t.cancelled()
                       and t.exception() is not None), "another lane")
        for t in tasks:
            t.cancel(f"stopped: lane {failed} failed in the together scenario")
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    finally:
        keep_busy.set()
        releaser.cancel()
