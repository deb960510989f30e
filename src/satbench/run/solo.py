"""Every lane alone (the solo scenario) on a sweep's context: its levels (with --refine's extra levels)
and repetitions, then its open-loop rates, on one server; an adaptive lane's levels come from its
planner (run.adaptive).

A level that loses its server is recorded as a server failure (run.failures); the lane's levels at or
above it are not run, and a fresh server runs the rest.
"""

from __future__ import annotations

from satbench.config.schema import LaneConfig
from satbench.errors import LevelFailedError, RuntimeStartError
from satbench.records.ledger import open_unit, refine_unit, solo_unit
from satbench.records.manifest import ServerFailure
from satbench.run.context import SweepContext
from satbench.run.lane_session import LaneSession
from satbench.run.levels import LevelRunner
from satbench.run.memory import memory_at_end
from satbench.run.plan import requests_in

Unit = tuple[int, int]  # (repetition, level)


async def solo_units(ctx: SweepContext, session: LaneSession, units: list[Unit], warmup: bool = True,
                     requests: int | None = None) -> LaneSession | None:
    """Run the units in order; a level that loses its server is recorded, the lane's levels at or
    above it are dropped, and a fresh server runs the rest. None when no server is left. Without
    `warmup` the units send no warmup requests (the server has run the level already);
    `requests`: measured requests per unit instead of the lane's own."""
    lane, restarts = session.lane, 0
    for rep, n in units:
        if not ctx.wanted(lane.name, n, rep):
            continue
        try:
            levels = LevelRunner(session)
            plan = await levels.plan(n, rep, background=False, warmup=warmup, measured=requests)
            await levels.run(plan, ctx.events, ctx.progress)
        except LevelFailedError as exc:
            skipped = [solo_unit(lane.name, m, r) for r, m in units if m >= n and (r, m) != (rep, n)
                       and not ctx.ledger.done(solo_unit(lane.name, m, r))]
            failure = await ctx.record_failure(session, exc, solo_unit(lane.name, n, rep), skipped)
            restarts += 1
            fresh = await _restarted(ctx, lane, units, failure, restarts)
            if fresh is None:
                return None
            session = fresh
            continue
        ctx.ledger.complete(solo_unit(lane.name, n, rep))
    return session


async def _restarted(ctx: SweepContext, lane: LaneConfig, units: list[Unit], failure: ServerFailure,
                     restart: int) -> LaneSession | None:
    """A fresh server for the units still wanted after `failure` (its `restart`-th), recorded with
    it; None when none is wanted or it did not start (recorded too)."""
    if not any(ctx.wanted(lane.name, m, r) for r, m in units):
        return None
    try:
        session = await ctx.start(lane, "solo", restart=restart)
    except RuntimeStartError as start_exc:
        left = [solo_unit(lane.name, m, r) for r, m in units if ctx.wanted(lane.name, m, r)]
        ctx.failures.restart_failed(failure, start_exc, left)
        return None
    ctx.failures.restarted(failure, session.runtime_info())
    return session


def open_wanted(ctx: SweepContext, lane: LaneConfig) -> bool:
    """Whether the lane has open-loop rates still to run (`open/LANE` not done)."""
    return bool(lane.rates) and not ctx.ledger.done(open_unit(lane.name))


async def after_levels(ctx: SweepContext, session: LaneSession) -> LaneSession | None:
    """What follows a lane's levels on their server: the memory read again, then its open-loop
    rates; None when the server was lost."""
    _memory_after_levels(ctx, session)
    return await _open_rates(ctx, session)


async def _open_rates(ctx: SweepContext, session: LaneSession) -> LaneSession | None:
    """The lane's open-loop rates, lowest first, on the server its levels ran on, as one unit
    (`open/LANE`; a resume runs them all again). A rate that loses the server is recorded and
    ends the unit: the higher rates would load it more. None when the server was lost."""
    lane = session.lane
    if not open_wanted(ctx, lane):
        return session
    assert lane.rates is not None
    for k in range(1, len(lane.rates) + 1):
        try:
            await LevelRunner(session).run_open(k, 1, lane.workload.seed, ctx.events, ctx.progress)
        except LevelFailedError as exc:
            await ctx.record_failure(session, exc, open_unit(lane.name), [])
            return None
    ctx.ledger.complete(open_unit(lane.name))
    return session


def _memory_after_levels(ctx: SweepContext, session: LaneSession) -> None:
    """Read the memory left again once the lane's levels have run (its prompt cache at its
    fullest), beside the reading taken when its server started; once per run."""
    prov, lane = ctx.manifest.provenance, session.lane
    lp = prov.lanes.get(lane.name) if prov is not None else None
    memory = lp.runtime.memory if lp is not None else None
    if prov is None or lp is None or memory is None or memory.ram_available_end_bytes is not None:
        return
    memory = memory_at_end(memory, ctx.gpus if session.network_info().on_this_machine else None)
    lp = lp.model_copy(update={"runtime": lp.runtime.model_copy(update={"memory": memory})})
    ctx.ledger.keep_provenance(prov.model_copy(update={"lanes": {**prov.lanes, lane.name: lp}}))


class FixedSolo:
    """A lane with fixed levels alone: its levels × repetitions (interleaved: 1,2,4,8,1,2,4,8,…), then
    with --refine the extra levels chosen from them, then its open-loop rates, on one server."""

    def __init__(self, ctx: SweepContext) -> None:
        self.ctx = ctx

    async def run(self, lane: LaneConfig) -> None:
        ctx = self.ctx
        base = [(rep, n) for rep in range(1, lane.repetitions + 1) for n in lane.levels]
        refined = not ctx.cfg.refine or ctx.ledger.done(refine_unit(lane.name))
        if not any(ctx.wanted(lane.name, n, rep) for rep, n in base) and refined \
                and not open_wanted(ctx, lane):
            return  # --resume: this lane's solo part is finished
        first = await ctx.start(lane, "solo")
        session: LaneSession | None = first
        try:
            session = await solo_units(ctx, first, base)
            if session is not None and ctx.cfg.refine and not ctx.ledger.done(refine_unit(lane.name)):
                extra = self._refine_levels(lane)
                session = await solo_units(ctx, session, [(rep, n) for rep in range(1, lane.repetitions + 1)
                                                          for n in extra])
                ctx.ledger.complete(refine_unit(lane.name))
            if session is not None:
                session = await after_levels(ctx, session)
        finally:
            if session is not None:
                await ctx.stop(session)

    def _refine_levels(self, lane: LaneConfig) -> list[int]:
        """The extra levels --refine measures for this lane, chosen once from the levels measured
        before them and kept in run.json: a resume runs the same levels (one that an interrupt cut
        short among them again) instead of choosing anew from data that holds the cut-short part.
        The progress bar expects their requests from the moment they are chosen."""
        ctx = self.ctx
        chosen = ctx.ledger.refine_levels(lane.name)
        if chosen is None:
            chosen = [n for n in ctx.derivation.refine_levels(ctx.run_dir, lane) if n not in lane.levels
                      and ((c := ctx.failures.ceiling(lane.name)) is None or n < c)]
            ctx.ledger.keep_refine_levels(lane.name, chosen)
            added = [solo_unit(lane.name, n, rep) for rep in range(1, lane.repetitions + 1) for n in chosen]
            ctx.progress.skip(-requests_in(ctx.cfg, added, ctx.manifest.refine_levels))
        return [n for n in chosen if (c := ctx.failures.ceiling(lane.name)) is None or n < c]
