"""The sweep: every lane alone, one after the other, then (with `together`) all lanes at once.

Per lane (solo): model → server → probe → workload → sampler → levels with repetitions
interleaved (1,2,4,8,1,2,4,8,…) → stop. Together: every lane's server at once, levels in
lockstep by position (the k-th level of each lane at the same time); a lane that finishes its
measured requests first keeps its streams busy with background requests until every lane
has finished, so each lane is measured under the others' full load. Only the level positions
and repetitions that every lane has run together (a warning names what is left out).

Whatever ends the run, run.json gets its final status and results.json is computed from the
raw files that exist.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from pathlib import Path
from typing import Any, Protocol

import satbench
from satbench.config.schema import LaneConfig, RunConfig, not_together, together_shape
from satbench.errors import LevelFailedError, RunDirError, RuntimeStartError, SatbenchError, UserError
from satbench.host.gpu import NvmlGpus, open_nvml
from satbench.host.hardware import describe_host
from satbench.load.liveness import LIVENESS_TIMEOUT_S
from satbench.models.resolve import resolve_model
from satbench.records.events import EVENTS_FILE, SAMPLES_FILE, JsonlWriter
from satbench.records.layout import clear_derived
from satbench.records.ledger import Ledger, fairness_unit, refine_unit, solo_unit, together_unit, utc_now
from satbench.records.manifest import (HostInfo, ModelInfo, Provenance, RunManifest, ServerFailure,
                                       read_manifest, satbench_source)
from satbench.records.rundir import run_lock
from satbench.run.failures import Failures
from satbench.run.fairness import FairnessRunner
from satbench.run.interrupts import ignore_second_interrupt, sigint_handler_kept
from satbench.run.lane_session import (LaneSession, Progress, SilentProgress, make_runtime, memory_at_end,
                                       probe_buffers, together_step)
from satbench.run.logs import server_log_path
from satbench.run.plan import fairness_lane, requests_in, total_requests, without_credentials
from satbench.run.resume import (begin_session, check_same_config, check_same_source_and_host, not_run_again,
                                 refused_reason, refused_session, units_not_to_run)
from satbench.server.checks import check_same_server, check_server_fits
from satbench.workload.builder import new_nonce
from satbench.workload.fairness_plan import fairness_plan


class Derivation(Protocol):
    """What the sweep asks of the deriving side, which `satbench.pipeline` provides: the measuring
    side never imports analysis, saturation or report."""

    def refine_levels(self, run_dir: Path, lane: LaneConfig) -> list[int]:
        """The extra levels --refine measures for `lane`, from the levels recorded so far."""

    def derive(self, run_dir: Path) -> Any:
        """The results of the raw files, written to the run directory (results.json, verdicts.json)."""

    def stale_note(self, run_dir: Path, rewritten: list[str]) -> str | None:
        """A note naming the files whose SHA256SUMS entry a rewrite made stale, else None."""


class Sweep:
    """One run (one or more lanes) into one run directory; `derivation` turns what it recorded into
    results, at the end (inside the run lock) and for --refine. The sweep decides what runs when;
    run.json is kept by `ledger` (records.ledger) and server failures by `failures` (run.failures)."""

    def __init__(self, cfg: RunConfig, run_dir: Path, command_line: list[str], derivation: Derivation,
                 progress: Progress | None = None, resume: RunManifest | None = None,
                 liveness_timeout_s: float = LIVENESS_TIMEOUT_S) -> None:
        self.derivation = derivation
        self.cfg, self._secrets = without_credentials(cfg)  # user:password is never written down
        self.run_dir, self.command_line = run_dir, command_line
        self.progress = progress or SilentProgress()
        self.nonce = new_nonce()
        self.results: Any = None
        self.interrupted_by = "the user (Ctrl-C)"  # the CLI's SIGTERM handler says SIGTERM
        self.session = 0
        self.resuming = resume is not None
        if resume is not None:
            check_same_config(resume.config, self.cfg)
            self.ledger = Ledger(run_dir, resume)
        else:
            self.ledger = Ledger.new(run_dir, command_line, self.cfg)
        self.failures = Failures(self.ledger, self.cfg, self.progress)
        self._models: dict[str, tuple[Path | None, ModelInfo]] = {}
        self._host: tuple[NvmlGpus | None, HostInfo] | None = None
        self._finished_before: str | None = None
        self.refined: dict[str, list[int]] = {}
        self.liveness_timeout_s = liveness_timeout_s  # every lane session's bound (liveness.py)

    @property
    def manifest(self) -> RunManifest:
        """run.json as this sweep keeps it (`ledger` writes it)."""
        return self.ledger.manifest

    def run(self) -> Any:
        """Execute every lane, holding the run directory (`run_lock`); raises SatbenchError after
        writing what was measured. When the run fails, the error that stopped it is the one raised,
        even if recording the failure fails too (a full or read-only disk fails every later write).
        A resume that is refused (another machine, a model gone, the run in use) writes nothing."""
        with run_lock(self.run_dir), sigint_handler_kept():
            if self.resuming:
                self._resume_preflight()
            return self._run_locked()

    def _resume_preflight(self) -> None:
        """Everything that can refuse a resume without a server, before anything is written."""
        if read_manifest(self.run_dir) != self.manifest:
            raise UserError(f"--resume {self.run_dir}: the run changed on disk while this resume started; "
                            "try again")
        self._host = self._this_host()
        check_same_source_and_host(self.manifest.provenance, satbench_source(), self._host[1])
        self.resolve_models()
        self._finished_before = self.manifest.finished_at  # a refused resume leaves it (measured_at reads it)
        self.session = begin_session(self.run_dir, self.manifest, self.command_line, satbench.__version__)

    @staticmethod
    def _this_host() -> tuple[NvmlGpus | None, HostInfo]:
        gpus = open_nvml()
        return gpus, describe_host(gpus)

    def resolve_models(self) -> None:
        """Find (or assemble) and hash every lane's model; a bad one is a UserError or ModelError."""
        found: dict[tuple[str | None, str], tuple[Path | None, ModelInfo]] = {}
        for lane in self.cfg.lanes:  # fail on a bad model before any server starts; each file hashed once
            key = (lane.runtime.model, lane.runtime.model_dir)
            if key not in found:
                found[key] = resolve_model(lane.runtime.model, Path(lane.runtime.model_dir))
            self._models[lane.name] = found[key]

    def _run_locked(self) -> Any:
        self.ledger.write()
        ok, refused = False, None
        try:
            asyncio.run(self._run_all())
        except KeyboardInterrupt:
            self._finish_quietly("interrupted", f"interrupted by {self.interrupted_by}")
            raise
        except SatbenchError as exc:
            refused = refused_session(self.manifest) if self.resuming and isinstance(exc, UserError) else None
            if refused is not None:  # nothing measured: the run stays as it was, and says why not resumed
                self._finish_quietly(refused.from_status, refused_reason(refused, exc), keep_finished=True)
            else:
                self._finish_quietly("failed", str(exc))
            raise
        except Exception as exc:
            self._finish_quietly("failed", f"internal error: {exc.__class__.__name__}: {exc}")
            raise
        else:
            self._finish("complete", None)
            ok = True
        finally:
            if self.manifest.provenance is not None and self.manifest.provenance.lanes:
                try:
                    if ok:  # a Ctrl-C from here on leaves run.json complete and no stale derived file
                        clear_derived(self.run_dir)
                    self.results = self.derivation.derive(self.run_dir)
                except SatbenchError:
                    if ok:
                        raise  # else the error already on its way out is the one to report
            rewritten = ["run.json", "results.json"]  # by the refusal: a reported run's bundle is stale
            if refused is not None and (note := self.derivation.stale_note(self.run_dir, rewritten)):
                print(note, file=sys.stderr)
        assert self.results is not None
        return self.results

    def _finish_quietly(self, status: str, reason: str | None, keep_finished: bool = False) -> None:
        with contextlib.suppress(RunDirError):
            self._finish(status, reason, keep_finished)

    def _finish(self, status: str, reason: str | None, keep_finished: bool = False) -> None:
        """Record how the run ended, now; with `keep_finished`, at the end time it had before this
        session (none for a run that never ended: measured_at reads it)."""
        self.ledger.finish(status, reason, self._finished_before if keep_finished else utc_now())

    async def _run_all(self) -> None:
        ignore_second_interrupt()
        gpus, host = self._host or self._this_host()
        if self.manifest.provenance is None:
            commit, changed = satbench_source()
            self.manifest.provenance = Provenance(satbench_version=satbench.__version__,
                                                  satbench_commit=commit, satbench_modified_files=changed,
                                                  host=host)
        self.ledger.write()
        if not self._models:
            self.resolve_models()
        events = JsonlWriter(self.run_dir / EVENTS_FILE)
        samples = JsonlWriter(self.run_dir / SAMPLES_FILE)
        for line in not_run_again(self.manifest, self.session) if self.resuming else []:
            print(f"satbench: {line}", file=sys.stderr)
        self.progress.begin(total_requests(self.cfg, units_not_to_run(self.manifest),
                                           self.manifest.refine_levels))
        try:
            if not self.cfg.fairness_only:
                for lane in self.cfg.lanes:
                    try:
                        await self._solo(lane, events, samples, gpus)
                    except RuntimeStartError as exc:
                        self._lane_did_not_start(lane, "solo", exc)
                if self.cfg.together:
                    await self._together(events, samples, gpus)
            if self.cfg.with_fairness or self.cfg.fairness_only:
                for lane in self.cfg.lanes:
                    await self._fairness(lane, events, samples, gpus)
            if (error := self.failures.nothing_measured_error()) is not None:  # nothing at all was measured
                raise error
        finally:
            try:
                events.close()
            finally:
                try:
                    samples.close()
                finally:
                    self.progress.end()

    def _lane_did_not_start(self, lane: LaneConfig, scenario: str, exc: RuntimeStartError) -> None:
        """A lane of a several-lane run whose server will not start (a URL that is down, a binary
        that exits) is recorded as a server failure and the run goes on with the other lanes, so
        what they measure is kept and recommended. A one-lane run has nothing else to measure:
        the start failure is its answer (exit 3)."""
        if len(self.cfg.lanes) == 1:
            raise exc
        self.failures.did_not_start(lane.name, scenario, self.session, exc,  # type: ignore[arg-type]
                                    [self._log_path(lane, scenario), self._log_path(lane, "memory")])

    def _log_path(self, lane: LaneConfig, scenario: str, restart: int = 0) -> Path:
        """The log file of `lane`'s server for `scenario` in this session (`server_log_path`)."""
        return server_log_path(self.run_dir, lane.name, len(self.cfg.lanes) == 1, scenario, self.session,
                               restart)

    async def _start(self, lane: LaneConfig, scenario: str, samples: JsonlWriter, gpus,
                     restart: int = 0) -> LaneSession:
        path, model = self._models[lane.name]
        prov = self.manifest.provenance
        assert prov is not None
        buffers = None  # the lane's memory, read once: from a start of its own at log verbosity 4
        if scenario == "solo" and not restart and lane.name not in prov.lanes:
            buffers = await probe_buffers(lane, path, self._log_path(lane, "memory"))
        runtime = make_runtime(lane, path, self._log_path(lane, scenario, restart))
        session = LaneSession(lane, scenario, runtime, model, self._secrets[lane.name], self.nonce)
        session.session_index, session.liveness_timeout_s = self.session, self.liveness_timeout_s
        try:
            await runtime.start_async()  # Ctrl-C / SIGTERM during a slow start lands here and stops it
            await session.open(samples, gpus, buffers)
            if scenario != "fairness":
                check_server_fits(lane, session.runtime_info(), self.cfg.strict)
            if lane.name in prov.lanes:
                check_same_server(lane.name, prov.lanes[lane.name], scenario, session.model_info(),
                                  session.runtime_info())
        except BaseException:
            await session.close()
            runtime.stop()
            raise
        if restart:
            return session  # recorded with its ServerFailure
        self.ledger.record_server(lane.name, scenario, self.session, session)
        return session

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
        base = [(rep, n) for rep in range(1, lane.repetitions + 1) for n in lane.levels]
        if not any(self._wanted(lane.name, n, rep) for rep, n in base) and (
                not self.cfg.refine or self.ledger.done(refine_unit(lane.name))):
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
        finally:
            if session is not None:
                await self._stop(session)

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
                          samples: JsonlWriter, gpus) -> LaneSession | None:
        """Run the units in order; a level that loses its server is recorded, the lane's levels at or
        above it are dropped, and a fresh server runs the rest. None when no server is left."""
        lane, restarts = session.lane, 0
        for rep, n in units:
            if not self._wanted(lane.name, n, rep):
                continue
            try:
                await session.run(await session.plan(n, rep, background=False), events, self.progress)
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

    async def _fairness(self, lane: LaneConfig, events: JsonlWriter, samples: JsonlWriter, gpus) -> None:
        if self.ledger.done(fairness_unit(lane.name)):
            return
        try:
            started = await self._start(fairness_lane(lane), "fairness", samples, gpus)
        except RuntimeStartError as exc:
            if not self.ledger.any_completed() and len(self.cfg.lanes) == 1:
                raise  # nothing measured, nothing else to measure: the start failure is the answer (exit 3)
            # e.g. the checks' longer context does not fit where the sweep's did: keep what was measured
            self.failures.fairness_did_not_start(lane.name, self.session, exc,
                                                 self._log_path(lane, "fairness"))
            return
        session: LaneSession | None = started
        try:
            plan = fairness_plan(lane, started.runtime_info(), started.network_info())
            runner = FairnessRunner(started, plan, events, self.progress, self.nonce)
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
