"""An adaptive lane alone: the steps its planner (the deriving side's, `Derivation.planner`) yields,
each recorded in run.json, then run on the lane's server; a resume replays the recorded steps
(running those not done) and plans on from there. Its open-loop rates follow on the same server.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from dataclasses import dataclass

from satbench.config.schema import LaneConfig
from satbench.records.ledger import solo_unit
from satbench.records.manifest import PlanDecision
from satbench.run.context import PlanTick, SweepContext
from satbench.run.lane_session import LaneSession
from satbench.run.plan import planned_solo_units, requests_in
from satbench.run.solo import after_levels, open_wanted, solo_units

Planner = Generator[PlanDecision, PlanTick, None]


@dataclass
class _Climb:
    """One adaptive lane's sweep in progress: its server (None once lost for good), when the sweep
    began (time.monotonic(), less the time a resumed sweep had already taken), the planned units not
    yet stepped on, and the levels the current server has run (a fresh one warms up again)."""

    lane: LaneConfig
    session: LaneSession | None
    begun: float
    planned: set[str]
    warmed: tuple[LaneSession | None, set[int]]


class AdaptiveSolo:
    """The solo scenario of an adaptive lane, on a sweep's context."""

    def __init__(self, ctx: SweepContext) -> None:
        self.ctx = ctx

    async def run(self, lane: LaneConfig) -> None:
        """The lane's adaptive sweep, then what follows its levels (`solo.after_levels`)."""
        ctx = self.ctx
        recorded = ctx.ledger.plan(lane.name)
        if recorded and recorded[-1].action == "stop" and not open_wanted(ctx, lane):
            return  # --resume: this lane's adaptive sweep is finished
        first = await ctx.start(lane, "solo")
        slots = first.runtime_info().total_slots
        past_slots = not lane.runtime.starts_server and not ctx.cfg.strict  # --strict: never above the slots
        planner = ctx.derivation.planner(ctx.run_dir, lane, slots, past_slots, recorded)
        climb = _Climb(lane, first, time.monotonic() - (recorded[-1].elapsed_s if recorded else 0.0),
                       set(planned_solo_units(lane)), (first, set()))
        try:
            await self._climb(climb, planner, len(recorded))
            ctx.progress.skip(requests_in(ctx.cfg, [u for u in climb.planned if not ctx.ledger.done(u)]))
            if climb.session is not None:
                climb.session = await after_levels(ctx, climb.session)
        finally:
            planner.close()
            if climb.session is not None:
                await ctx.stop(climb.session)

    async def _climb(self, climb: _Climb, planner: Planner, recorded: int) -> None:
        """Each step the planner yields, kept in run.json unless among the `recorded` ones, then run,
        until it stops or the lane's server is lost for good (a stop decision of its own then)."""
        ctx, lane = self.ctx, climb.lane
        step, taken = next(planner), 0
        while True:
            if taken >= recorded:
                ctx.ledger.keep_decision(lane.name, step.model_copy(update={"session": ctx.session}))
            taken += 1
            if step.action == "stop" or step.level is None or step.repetition is None:
                return
            ran_s = await self._step(climb, step.level, step.repetition, step.requests)
            if climb.session is None:  # lost, no fresh one started (recorded by Failures): nothing can run
                ctx.ledger.keep_decision(lane.name, PlanDecision(
                    action="stop", reason="the lane's server failed and did not start again",
                    elapsed_s=round(time.monotonic() - climb.begun, 3), session=ctx.session))
                return
            elapsed_s = time.monotonic() - climb.begun
            step = planner.send(PlanTick(elapsed_s, ran_s, ctx.failures.ceiling(lane.name)))

    async def _step(self, climb: _Climb, level: int, rep: int, requests: int | None) -> float | None:
        """One step's unit, run unless done or at the lane's ceiling: how long it took (s), else None."""
        ctx, lane = self.ctx, climb.lane
        unit = solo_unit(lane.name, level, rep)
        ran_s = None
        if climb.session is not None and ctx.wanted(lane.name, level, rep):
            if unit not in climb.planned:  # the progress bar expected the planned estimate only
                ctx.progress.skip(-lane.measured_requests(level))
            t0 = time.monotonic()
            if climb.warmed[0] is not climb.session:  # a fresh server after a failure warms up again
                climb.warmed = (climb.session, set())
            warm = climb.warmed[1]  # the levels this server has run
            shared = lane.adaptive is None or lane.adaptive.warmup == "first_level"
            climb.session = await solo_units(ctx, climb.session, [(rep, level)], requests=requests,
                                             warmup=not warm if shared else level not in warm)
            climb.warmed[1].add(level)
            ran_s = time.monotonic() - t0
        climb.planned.discard(unit)
        return ran_s
