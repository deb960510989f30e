"""The scenarios of a sweep over its lanes' servers: every lane alone (solo, with --refine's extra
levels), all lanes at once (together), and the fairness checks, each unit recorded in run.json as it
completes (records.ledger).

A level that loses its server is recorded as a server failure (run.failures); the lane's levels at or
above it are not run, and a fresh server runs the rest. Together: the level positions and repetitions
every lane has, in lockstep, until a lane fails; the fairness checks end at the check that lost the
server.
"""

from __future__ import annotations

import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from satbench.config.schema import LaneConfig, RunConfig, not_together, together_shape
from satbench.errors import LevelFailedError, RuntimeStartError
from satbench.host.gpu import NvmlGpus
from satbench.records.events import Scenario
from satbench.records.ledger import (
    Ledger,
    StartScenario,
    fairness_unit,
    open_unit,
    refine_unit,
    solo_unit,
    together_unit,
)
from satbench.records.manifest import PlanDecision, RunManifest, ServerFailure
from satbench.records.writer import JsonlWriter
from satbench.run.failures import Failures
from satbench.run.fairness import FairnessJudge, FairnessRunner
from satbench.run.lane_session import LaneSession, Progress, together_step
from satbench.run.logs import server_log_path
from satbench.run.memory import memory_at_end
from satbench.run.plan import fairness_lane, planned_solo_units, requests_in
from satbench.workload.fairness_plan import fairness_plan


@dataclass(frozen=True)
class PlanTick:
    """What the sweep tells an adaptive lane's planner after each step: the lane's sweep time (s), how
    long the step took (s; None when it did not run) and the lowest level whose server failed."""

    elapsed_s: float
    last_step_s: float | None
    failed_at: int | None


class Derivation(Protocol):
    """What the sweep asks of the deriving side, which `satbench.pipeline` provides: the measuring
    side never imports analysis, saturation or report."""

    def refine_levels(self, run_dir: Path, lane: LaneConfig) -> list[int]:
        """The extra levels --refine measures for `lane`, from the levels recorded so far."""

    def planner(self, run_dir: Path, lane: LaneConfig, slots: int | None, past_slots: bool,
                recorded: list[PlanDecision]) -> Generator[PlanDecision, PlanTick, None]:
        """`lane`'s adaptive sweep (saturation/planner.py): yields each step, is sent a PlanTick after
        it (and reads what the step recorded in `run_dir`); the `recorded` decisions come first."""

    def derive(self, run_dir: Path) -> Any:
        """The results of the raw files, written to the run directory (results.json, verdicts.json)."""

    def stale_note(self, run_dir: Path, rewritten: list[str]) -> str | None:
        """A note naming the files whose SHA256SUMS entry a rewrite made stale, else None."""

    @property
    def judge(self) -> FairnessJudge:
        """The verdicts the fairness runner tops its checks up by."""


class LaneScenarios(ABC):
    """The solo, together and fairness flows over a run's lanes. The subclass (run.sweep.Sweep) sets
    the attributes below and starts each server (`_start`)."""

    cfg: RunConfig
    run_dir: Path
    derivation: Derivation
    ledger: Ledger
    failures: Failures
    progress: Progress
    nonce: str
    session: int  # this session's index in run.json (0: the first)
    refined: dict[str, list[int]]  # lane → the extra levels --refine ran in this session

    @property
    def manifest(self) -> RunManifest:
        """run.json as this sweep keeps it (`ledger` writes it)."""
        return self.ledger.manifest

    @abstractmethod
    async def _start(self, lane: LaneConfig, scenario: Scenario, samples: JsonlWriter,
                     gpus: NvmlGpus | None, restart: int = 0) -> LaneSession:
        """`lane`'s server for `scenario`, started and checked; `restart` counts the restarts after
        a lost server."""

    def _lane_did_not_start(self, lane: LaneConfig, scenario: StartScenario, exc: RuntimeStartError) -> None:
        """A lane of a several-lane run whose server will not start (a URL that is down, a binary
        that exits) is recorded as a server failure and the run goes on with the other lanes, so
        what they measure is kept and recommended. A one-lane run has nothing else to measure:
        the start failure is its answer (exit 3)."""
        if len(self.cfg.lanes) == 1:
            raise exc
        self.failures.did_not_start(lane.name, scenario, self.session, exc,
                                    [self._log_path(lane, scenario), self._log_path(lane, "memory")])

    def _log_path(self, lane: LaneConfig, scenario: str, restart: int = 0) -> Path:
        """The log file of `lane`'s server for `scenario` in this session (`server_log_path`)."""
        return server_log_path(self.run_dir, lane.name, len(self.cfg.lanes) == 1, scenario, self.session,
                               restart)

    async def _stop(self, session: LaneSession) -> None:
        try:
            await session.close()
        finally:
            session.runtime.stop()

    def _wanted(self, lane: str, n: int, rep: int) -> bool:
        """Whether solo unit (lane, level n, repetition rep) is still to run: not done, and below
        the lane's ceiling (`Failures.ceiling`)."""
        ceiling = self.failures.ceiling(lane)
        return not self.ledger.done(solo_unit(lane, n, rep)) and (ceiling is None or n < ceiling)

    async def _record_failure(self, session: LaneSession, exc: LevelFailedError, unit: str,
                              skipped: list[str]) -> ServerFailure:
        """Stop the failed server and write down what failed, why, and what will not run because of it."""
        log = session.runtime.log_path
        await self._stop(session)
        return self.failures.level_failed(exc, unit, skipped, log, self.session)

    async def _solo(self, lane: LaneConfig, events: JsonlWriter, samples: JsonlWriter, gpus) -> None:
        if lane.adaptive is not None:
            return await self._solo_adaptive(lane, events, samples, gpus)
        base = [(rep, n) for rep in range(1, lane.repetitions + 1) for n in lane.levels]
        refined = not self.cfg.refine or self.ledger.done(refine_unit(lane.name))
        if not any(self._wanted(lane.name, n, rep) for rep, n in base) and refined \
                and not self._open_wanted(lane):
            return  # --resume: this lane's solo part is finished
        first = await self._start(lane, "solo", samples, gpus)
        session: LaneSession | None = first
        try:
            session = await self._solo_units(first, base, events, samples, gpus)
            if session is not None and self.cfg.refine and not self.ledger.done(refine_unit(lane.name)):
                extra = self._refine_levels(lane)
                self.refined[lane.name] = extra
                session = await self._solo_units(session, [(rep, n) for rep in range(1, lane.repetitions + 1)
                                                            for n in extra], events, samples, gpus)
                self.ledger.complete(refine_unit(lane.name))
            if session is not None:
                self._memory_after_levels(lane, session, gpus)
                session = await self._open_rates(session, events)
        finally:
            if session is not None:
                await self._stop(session)

    async def _solo_adaptive(self, lane: LaneConfig, events: JsonlWriter, samples: JsonlWriter,
                             gpus) -> None:
        """The lane's adaptive sweep: each step its planner yields is recorded in run.json, then run;
        a resume replays the recorded steps (running those not done) and plans on from there."""
        recorded = self.ledger.plan(lane.name)
        if recorded and recorded[-1].action == "stop" and not self._open_wanted(lane):
            return  # --resume: this lane's adaptive sweep is finished
        first = await self._start(lane, "solo", samples, gpus)
        session: LaneSession | None = first
        slots = first.runtime_info().total_slots
        past_slots = lane.runtime.kind == "url" and not self.cfg.strict  # --strict: never above the slots
        planner = self.derivation.planner(self.run_dir, lane, slots, past_slots, recorded)
        begun = time.monotonic() - (recorded[-1].elapsed_s if recorded else 0.0)
        planned = set(planned_solo_units(lane))
        try:
            step, taken = next(planner), 0
            warmed: tuple[LaneSession | None, set[int]] = (session, set())  # levels this server has run
            while True:
                if taken >= len(recorded):
                    self.ledger.keep_decision(lane.name, step.model_copy(update={"session": self.session}))
                taken += 1
                if step.action == "stop" or step.level is None or step.repetition is None:
                    break
                unit = solo_unit(lane.name, step.level, step.repetition)
                ran_s = None
                if session is not None and self._wanted(lane.name, step.level, step.repetition):
                    if unit not in planned:  # the progress bar expected the planned estimate only
                        self.progress.skip(-lane.measured_requests(step.level))
                    t0 = time.monotonic()
                    if warmed[0] is not session:  # a fresh server after a failure warms up again
                        warmed = (session, set())
                    session = await self._solo_units(session, [(step.repetition, step.level)], events,
                                                     samples, gpus, warmup=step.level not in warmed[1],
                                                     requests=step.requests)
                    warmed[1].add(step.level)
                    ran_s = time.monotonic() - t0
                planned.discard(unit)
                if session is None:  # lost, and no fresh one started (recorded by Failures): nothing can run
                    self.ledger.keep_decision(lane.name, PlanDecision(
                        action="stop", reason="the lane's server failed and did not start again",
                        elapsed_s=round(time.monotonic() - begun, 3), session=self.session))
                    break
                tick = PlanTick(time.monotonic() - begun, ran_s, self.failures.ceiling(lane.name))
                step = planner.send(tick)
            self.progress.skip(requests_in(self.cfg, [u for u in planned if not self.ledger.done(u)]))
            if session is not None:
                self._memory_after_levels(lane, session, gpus)
                session = await self._open_rates(session, events)
        finally:
            planner.close()
            if session is not None:
                await self._stop(session)

    def _open_wanted(self, lane: LaneConfig) -> bool:
        """Whether the lane has open-loop rates still to run (`open/LANE` not done)."""
        return bool(lane.rates) and not self.ledger.done(open_unit(lane.name))

    async def _open_rates(self, session: LaneSession, events: JsonlWriter) -> LaneSession | None:
        """The lane's open-loop rates, lowest first, on the server its levels ran on, as one unit
        (`open/LANE`; a resume runs them all again). A rate that loses the server is recorded and
        ends the unit: the higher rates would load it more. None when the server was lost."""
        lane = session.lane
        if not self._open_wanted(lane):
            return session
        assert lane.rates is not None
        for k in range(1, len(lane.rates) + 1):
            try:
                await session.run_open(k, 1, lane.workload.seed, events, self.progress)
            except LevelFailedError as exc:
                await self._record_failure(session, exc, open_unit(lane.name), [])
                return None
        self.ledger.complete(open_unit(lane.name))
        return session

    def _memory_after_levels(self, lane: LaneConfig, session: LaneSession, gpus) -> None:
        """Read the memory left again once the lane's levels have run (its prompt cache at its
        fullest), beside the reading taken when its server started; once per run."""
        prov = self.manifest.provenance
        rt = prov.lanes[lane.name].runtime if prov is not None and lane.name in prov.lanes else None
        if rt is None or rt.memory is None or rt.memory.ram_available_end_bytes is not None:
            return
        rt.memory = memory_at_end(rt.memory, gpus if session.network_info().on_this_machine else None)
        self.ledger.write()

    def _refine_levels(self, lane: LaneConfig) -> list[int]:
        """The extra levels --refine measures for this lane, chosen once from the levels measured
        before them and kept in run.json: a resume runs the same levels (one that an interrupt cut
        short among them again) instead of choosing anew from data that holds the cut-short part.
        The progress bar expects their requests from the moment they are chosen."""
        chosen = self.ledger.refine_levels(lane.name)
        if chosen is None:
            chosen = [n for n in self.derivation.refine_levels(self.run_dir, lane) if n not in lane.levels
                      and ((c := self.failures.ceiling(lane.name)) is None or n < c)]
            self.ledger.keep_refine_levels(lane.name, chosen)
            added = [solo_unit(lane.name, n, rep) for rep in range(1, lane.repetitions + 1) for n in chosen]
            self.progress.skip(-requests_in(self.cfg, added, self.manifest.refine_levels))
        return [n for n in chosen if (c := self.failures.ceiling(lane.name)) is None or n < c]

    async def _solo_units(self, session: LaneSession, units: list[tuple[int, int]], events: JsonlWriter,
                          samples: JsonlWriter, gpus, warmup: bool = True,
                          requests: int | None = None) -> LaneSession | None:
        """Run the units in order; a level that loses its server is recorded, the lane's levels at or
        above it are dropped, and a fresh server runs the rest. None when no server is left. Without
        `warmup` the units send no warmup requests (the server has run the level already);
        `requests`: measured requests per unit instead of the lane's own."""
        lane, restarts = session.lane, 0
        for rep, n in units:
            if not self._wanted(lane.name, n, rep):
                continue
            try:
                plan = await session.plan(n, rep, background=False, warmup=warmup, measured=requests)
                await session.run(plan, events, self.progress)
            except LevelFailedError as exc:
                skipped = [solo_unit(lane.name, m, r) for r, m in units if m >= n and (r, m) != (rep, n)
                           and not self.ledger.done(solo_unit(lane.name, m, r))]
                failure = await self._record_failure(session, exc, solo_unit(lane.name, n, rep), skipped)
                if not any(self._wanted(lane.name, m, r) for r, m in units):
                    return None
                restarts += 1
                try:
                    session = await self._start(lane, "solo", samples, gpus, restart=restarts)
                except RuntimeStartError as start_exc:
                    left = [solo_unit(lane.name, m, r) for r, m in units if self._wanted(lane.name, m, r)]
                    self.failures.restart_failed(failure, start_exc, left)
                    return None
                self.failures.restarted(failure, session.runtime_info())
                continue
            self.ledger.complete(solo_unit(lane.name, n, rep))
        return session

    async def _fairness(self, lane: LaneConfig, events: JsonlWriter, samples: JsonlWriter, gpus,
                        stop_at_fail: bool = False) -> None:
        """The lane's checks on a server of their own; `stop_at_fail`: they cap the sweep that follows,
        so they stop at the first that fails (FairnessRunner.run_all)."""
        if self.ledger.done(fairness_unit(lane.name)):
            return
        try:
            started = await self._start(fairness_lane(lane), "fairness", samples, gpus)
        except RuntimeStartError as exc:
            if self.cfg.fairness_only and not self.ledger.any_completed() and len(self.cfg.lanes) == 1:
                raise  # nothing measured, nothing else to measure: the start failure is the answer (exit 3)
            # e.g. the checks' longer context does not fit where the sweep's does: the sweep still runs
            self.failures.fairness_did_not_start(lane.name, self.session, exc,
                                                 self._log_path(lane, "fairness"))
            return
        session: LaneSession | None = started
        try:
            plan = fairness_plan(lane, started.runtime_info(), started.network_info())
            runner = FairnessRunner(started, plan, events, self.progress, self.nonce, self.derivation.judge,
                                    stop_at_fail=stop_at_fail)
            await runner.run_all()
        except LevelFailedError as exc:  # the checks after the one that lost the server are not run
            await self._record_failure(started, exc, fairness_unit(lane.name), [])
            session = None
        else:
            self.ledger.complete(fairness_unit(lane.name))
        finally:
            if session is not None:
                await self._stop(session)

    async def _together(self, events: JsonlWriter, samples: JsonlWriter, gpus) -> None:
        """The level positions and repetitions every lane has, all lanes at once (a step where a lane
        had nothing to run would measure the others alone, not together)."""
        steps, reps = together_shape(self.cfg)
        pending = [(rep, k) for rep in range(1, reps + 1) for k in range(steps)
                   if not self.ledger.done(together_unit(k, rep))]
        if not pending or self.failures.blocks_together(self.session):
            return  # a lane that would not start (this session) is not started beside the others
        for line in not_together(self.cfg):
            print(f"satbench: warning: --together: {line}", file=sys.stderr)
        sessions: list[LaneSession] = []
        try:
            for lane in self.cfg.lanes:
                try:
                    sessions.append(await self._start(lane, "together", samples, gpus))
                except RuntimeStartError as exc:  # recorded; the lanes' solo figures stand
                    self._lane_did_not_start(lane, "together", exc)
                    return
            for i, (rep, k) in enumerate(pending):
                try:
                    await together_step(sessions, k, rep, events, self.progress)
                except LevelFailedError as exc:  # the together scenario ends here; the rest of the run runs
                    failed = next(s for s in sessions if s.lane.name == exc.lane)
                    sessions.remove(failed)
                    await self._record_failure(failed, exc, together_unit(k, rep),
                                               [together_unit(kk, r) for r, kk in pending[i + 1:]])
                    return
                self.ledger.complete(together_unit(k, rep))
        finally:
            for s in sessions:
                await self._stop(s)
