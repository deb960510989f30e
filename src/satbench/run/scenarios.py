"""The scenarios of a sweep, each a small object over the sweep's context (run.context): every lane
alone (solo: run.solo, run.adaptive), all lanes at once (together), and the fairness checks, each
unit recorded in run.json as it completes (records.ledger).

A level that loses its server is recorded as a server failure (run.failures). Together: the level
positions and repetitions every lane has, in lockstep, until a lane fails; the fairness checks end
at the check that lost the server.
"""

from __future__ import annotations

import sys

from satbench.config.schema import LaneConfig, not_together, together_shape
from satbench.errors import LevelFailedError, RuntimeStartError
from satbench.records.ledger import fairness_unit, together_unit
from satbench.run.adaptive import AdaptiveSolo
from satbench.run.context import SweepContext
from satbench.run.fairness import FairnessRunner
from satbench.run.lane_session import LaneSession
from satbench.run.levels import together_step
from satbench.run.plan import fairness_lane
from satbench.run.solo import FixedSolo
from satbench.workload.fairness_plan import fairness_plan


async def solo(ctx: SweepContext, lane: LaneConfig) -> None:
    """The lane alone: the steps its planner yields (adaptive), else its fixed levels."""
    await (AdaptiveSolo(ctx) if lane.adaptive is not None else FixedSolo(ctx)).run(lane)


class Together:
    """Every lane's server at once, levels in lockstep by position (the k-th level of each lane at
    the same time): the level positions and repetitions every lane has (a step where a lane had
    nothing to run would measure the others alone, not together)."""

    def __init__(self, ctx: SweepContext) -> None:
        self.ctx = ctx

    async def run(self) -> None:
        ctx = self.ctx
        steps, reps = together_shape(ctx.cfg)
        pending = [(rep, k) for rep in range(1, reps + 1) for k in range(steps)
                   if not ctx.ledger.done(together_unit(k, rep))]
        if not pending or ctx.failures.blocks_together(ctx.session):
            return  # a lane that would not start (this session) is not started beside the others
        for line in not_together(ctx.cfg):
            print(f"satbench: warning: --together: {line}", file=sys.stderr)
        sessions: list[LaneSession] = []
        try:
            for lane in ctx.cfg.lanes:
                try:
                    sessions.append(await ctx.start(lane, "together"))
                except RuntimeStartError as exc:  # recorded; the lanes' solo figures stand
                    ctx.lane_did_not_start(lane, "together", exc)
                    return
            await self._steps(sessions, pending)
        finally:
            for s in sessions:
                await ctx.stop(s)

    async def _steps(self, sessions: list[LaneSession], pending: list[tuple[int, int]]) -> None:
        """The pending (repetition, position) steps in order; a lane that loses its server ends the
        together scenario there (its session leaves `sessions`, stopped); the rest of the run runs."""
        ctx = self.ctx
        for i, (rep, k) in enumerate(pending):
            try:
                await together_step(sessions, k, rep, ctx.events, ctx.progress)
            except LevelFailedError as exc:
                failed = next(s for s in sessions if s.lane.name == exc.lane)
                sessions.remove(failed)
                await ctx.record_failure(failed, exc, together_unit(k, rep),
                                         [together_unit(kk, r) for r, kk in pending[i + 1:]])
                return
            ctx.ledger.complete(together_unit(k, rep))


class Fairness:
    """A lane's fairness checks on a server of their own, as one unit (`fairness/LANE`)."""

    def __init__(self, ctx: SweepContext) -> None:
        self.ctx = ctx

    async def run(self, lane: LaneConfig, stop_at_fail: bool = False) -> None:
        """`stop_at_fail`: the checks cap the sweep that follows, so they stop at the first that
        fails (FairnessRunner.run_all)."""
        ctx = self.ctx
        if ctx.ledger.done(fairness_unit(lane.name)):
            return
        try:
            started = await ctx.start(fairness_lane(lane), "fairness")
        except RuntimeStartError as exc:
            if ctx.cfg.fairness_only and not ctx.ledger.any_completed() and len(ctx.cfg.lanes) == 1:
                raise  # nothing measured, nothing else to measure: the start failure is the answer (exit 3)
            # e.g. the checks' longer context does not fit where the sweep's does: the sweep still runs
            ctx.failures.fairness_did_not_start(lane.name, ctx.session, exc, ctx.log_path(lane, "fairness"))
            return
        session: LaneSession | None = started
        try:
            plan = fairness_plan(lane, started.runtime_info(), started.network_info())
            runner = FairnessRunner(started, plan, ctx.events, ctx.progress, ctx.nonce, ctx.derivation.judge,
                                    stop_at_fail=stop_at_fail)
            await runner.run_all()
        except LevelFailedError as exc:  # the checks after the one that lost the server are not run
            await ctx.record_failure(started, exc, fairness_unit(lane.name), [])
            session = None
        else:
            ctx.ledger.complete(fairness_unit(lane.name))
        finally:
            if session is not None:
                await ctx.stop(session)
