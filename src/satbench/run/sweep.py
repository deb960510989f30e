"""The sweep: every lane alone, one after the other, then (with `together`) all lanes at once.

Per lane: with `with_fairness`, the fairness checks first (`checks_first`; else after the solo and
together scenarios), on a server of their own: what they forbid caps the lane's adaptive climb
(pipeline.SweepDerivation.planner). Then solo: model → server → probe → workload → sampler →
levels with repetitions interleaved (1,2,4,8,1,2,4,8,…) → stop. Together: every lane's server at
once, levels in lockstep by position (the k-th level of each lane at the same time); a lane that finishes its
measured requests first keeps its streams busy with background requests until every lane
has finished, so each lane is measured under the others' full load. Only the level positions
and repetitions that every lane has run together (a warning names what is left out).

Whatever ends the run, run.json gets its final status and results.json is computed from the
raw files that exist.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import satbench
from satbench.config.limits import MAX_EVENTS, MAX_SAMPLES
from satbench.config.schema import LaneConfig, RunConfig
from satbench.errors import RunDirError, RuntimeStartError, SatbenchError, UserError
from satbench.gguf.resolve import resolve_model
from satbench.host.gpu import NvmlGpus, open_nvml
from satbench.host.hardware import describe_host
from satbench.load.liveness import LIVENESS_TIMEOUT_S
from satbench.records.events import EVENTS_FILE, SAMPLES_FILE, LevelMark, Scenario
from satbench.records.layout import clear_derived
from satbench.records.ledger import Ledger, utc_now
from satbench.records.manifest import (
    HostInfo,
    ModelInfo,
    Provenance,
    RunManifest,
    RunStatus,
    read_manifest,
    satbench_source,
)
from satbench.records.rundir import run_lock
from satbench.records.writer import JsonlWriter
from satbench.run.failures import Failures
from satbench.run.interrupts import ignore_second_interrupt, sigint_handler_kept
from satbench.run.lane_session import LaneSession, Progress, SilentProgress, make_runtime, probe_buffers
from satbench.run.plan import total_requests, without_credentials
from satbench.run.resume import (
    begin_session,
    check_same_config,
    check_same_source_and_host,
    not_run_again,
    refused_reason,
    refused_session,
    units_not_to_run,
)
from satbench.run.scenarios import Derivation, LaneScenarios
from satbench.server.checks import check_same_server, check_server_fits
from satbench.server.embedded import require_wheel
from satbench.server.server_args import check_lane_args
from satbench.workload.builder import new_nonce


def checks_first(lane: LaneConfig) -> bool:
    """Whether the lane's fairness checks run before its sweep: an adaptive lane whose server satbench
    starts, so that what they forbid caps its climb. A running server (--url) is not restarted: its
    checks, which put the most requests in flight, come after what it measured."""
    return lane.adaptive is not None and lane.runtime.kind != "url"


class Sweep(LaneScenarios):
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
            if lane.runtime.kind == "embedded":
                require_wheel(lane.name)
            try:
                check_lane_args(lane.runtime.kind, lane.server.extra_args, lane.runtime.server_bin)
            except UserError as exc:
                raise UserError(f"lane {lane.name}: {exc}") from None
            key = (lane.runtime.model, lane.runtime.model_dir)
            if key not in found:
                found[key] = resolve_model(lane.runtime.model, Path(lane.runtime.model_dir))
            self._models[lane.name] = found[key]

    def _run_locked(self) -> Any:
        self.ledger.write()
        self.ledger.hold_room()  # so that a disk filled by the run still records how it ended
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

    def _finish_quietly(self, status: RunStatus, reason: str | None, keep_finished: bool = False) -> None:
        """`_finish`, on the way out of an error (`reason`): one that cannot be recorded is said, not
        raised, unless it is that very error."""
        try:
            self._finish(status, reason, keep_finished)
        except RunDirError as exc:
            if str(exc) not in (reason or ""):
                print(f"satbench: run.json could not record the run as {status}: {exc}", file=sys.stderr)

    def _finish(self, status: RunStatus, reason: str | None, keep_finished: bool = False) -> None:
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
        # capped at what analysis reads; each lane's level in progress keeps room for its end mark
        events = JsonlWriter(self.run_dir / EVENTS_FILE, MAX_EVENTS, reserve=2 * len(self.cfg.lanes),
                             reserved=lambda record: isinstance(record, LevelMark))
        samples = JsonlWriter(self.run_dir / SAMPLES_FILE, MAX_SAMPLES)
        for line in not_run_again(self.manifest, self.session) if self.resuming else []:
            print(f"satbench: {line}", file=sys.stderr)
        self.progress.begin(total_requests(self.cfg, units_not_to_run(self.manifest),
                                           self.manifest.refine_levels))
        checked = [lane for lane in self.cfg.lanes if self.cfg.with_fairness or self.cfg.fairness_only]
        first = [lane for lane in checked if self.cfg.fairness_only or checks_first(lane)]
        try:
            for lane in self.cfg.lanes:
                if lane in first:  # before its sweep: they cap its climb, and stop at the first that fails
                    await self._fairness(lane, events, samples, gpus, stop_at_fail=not self.cfg.fairness_only)
                if not self.cfg.fairness_only:
                    try:
                        await self._solo(lane, events, samples, gpus)
                    except RuntimeStartError as exc:
                        self._lane_did_not_start(lane, "solo", exc)
            if self.cfg.together and not self.cfg.fairness_only:
                await self._together(events, samples, gpus)
            for lane in checked:
                if lane not in first:
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

    async def _start(self, lane: LaneConfig, scenario: Scenario, samples: JsonlWriter,
                     gpus: NvmlGpus | None, restart: int = 0) -> LaneSession:
        path, model = self._models[lane.name]
        prov = self.manifest.provenance
        assert prov is not None
        buffers = None  # the lane's memory, read once: from a start of its own at log verbosity 4
        # described: the lane's own server is in run.json, not only its fairness checks' server
        described = lane.name in prov.lanes and prov.lanes[lane.name].solo_recorded()
        if scenario == "solo" and not restart and not described:
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
