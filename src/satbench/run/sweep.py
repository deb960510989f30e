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

import sys
from pathlib import Path
from typing import Generic, TypeVar

import satbench
from satbench.config.limits import MAX_EVENTS, MAX_SAMPLES
from satbench.config.schema import LaneConfig, RunConfig
from satbench.errors import RunDirError, RuntimeStartError, SatbenchError, UserError
from satbench.gguf.resolve import resolve_model
from satbench.host.gpu import NvmlGpus, open_nvml
from satbench.host.hardware import describe_host
from satbench.load import eventloop
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
from satbench.run.context import Derivation, SweepContext
from satbench.run.failures import Failures
from satbench.run.interrupts import ignore_second_interrupt, sigint_handler_kept
from satbench.run.lane_session import LaneSession, Progress, SilentProgress
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
from satbench.run.scenarios import Fairness, Together, solo
from satbench.run.servers import LaneServers, Models
from satbench.server.embedded import require_wheel
from satbench.server.server_args import check_lane_args
from satbench.workload.builder import new_nonce

R = TypeVar("R")


def checks_first(lane: LaneConfig) -> bool:
    """Whether the lane's fairness checks run before its sweep: an adaptive lane whose server satbench
    starts, so that what they forbid caps its climb. A running server (--url) is not restarted: its
    checks, which put the most requests in flight, come after what it measured."""
    return lane.adaptive is not None and lane.runtime.starts_server


def this_host() -> tuple[NvmlGpus | None, HostInfo]:
    """This machine's GPUs (None without NVML) and its description."""
    gpus = open_nvml()
    return gpus, describe_host(gpus)


class Sweep(Generic[R]):
    """One run (one or more lanes) into one run directory; `derivation` turns what it recorded into
    results (`R`: its record), at the end (inside the run lock) and for --refine. The sweep decides
    which scenario (run.scenarios) runs when, over one context (run.context.SweepContext); run.json is
    kept by `ledger` (records.ledger) and server failures by `failures` (run.failures)."""

    def __init__(self, cfg: RunConfig, run_dir: Path, command_line: list[str], derivation: Derivation[R],
                 progress: Progress | None = None, resume: RunManifest | None = None,
                 liveness_timeout_s: float = LIVENESS_TIMEOUT_S) -> None:
        self.derivation = derivation
        self.cfg, self._secrets = without_credentials(cfg)  # user:password is never written down
        self.run_dir, self.command_line = run_dir, command_line
        self.progress = progress or SilentProgress()
        self.nonce = new_nonce()
        self.results: R | None = None
        self.interrupted_by = "the user (Ctrl-C)"  # the CLI's SIGTERM handler says SIGTERM
        self.session = 0
        self.resuming = resume is not None
        if resume is not None:
            check_same_config(resume.config, self.cfg)
            self.ledger = Ledger(run_dir, resume)
        else:
            self.ledger = Ledger.new(run_dir, command_line, self.cfg)
        self.failures = Failures(self.ledger, self.cfg, self.progress)
        self._models: Models = {}
        self._host: tuple[NvmlGpus | None, HostInfo] | None = None
        self._finished_before: str | None = None
        self.liveness_timeout_s = liveness_timeout_s  # every lane session's bound (liveness.py)
        self._servers: LaneServers | None = None  # this session's, once the run has begun

    @property
    def manifest(self) -> RunManifest:
        """run.json as this sweep keeps it (`ledger` writes it)."""
        return self.ledger.manifest

    def run(self) -> R:
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
        self._host = this_host()
        check_same_source_and_host(self.manifest.provenance, satbench_source(), self._host[1])
        self.resolve_models()
        self._finished_before = self.manifest.finished_at  # a refused resume leaves it (measured_at reads it)
        self.session = begin_session(self.run_dir, self.ledger, self.command_line, satbench.__version__)

    def resolve_models(self) -> None:
        """Find (or assemble) and hash every lane's model; a bad one is a UserError or ModelError."""
        found: dict[tuple[str | None, str], tuple[Path | None, ModelInfo]] = {}
        for lane in self.cfg.lanes:  # fail on a bad model before any server starts; each file hashed once
            if lane.runtime.engine_package is not None:
                require_wheel(lane.name)
            try:
                check_lane_args(lane.runtime.kind, lane.server.extra_args, lane.runtime.server_bin)
            except UserError as exc:
                raise UserError(f"lane {lane.name}: {exc}") from None
            key = (lane.runtime.model, lane.runtime.model_dir)
            if key not in found:
                found[key] = resolve_model(lane.runtime.model, Path(lane.runtime.model_dir))
            self._models[lane.name] = found[key]

    def _run_locked(self) -> R:
        self.ledger.write()
        self.ledger.hold_room()  # so that a disk filled by the run still records how it ended
        ok, refused = False, None
        try:
            eventloop.run(self._run_all())
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
            self._derive(ok, refused is not None)
        assert self.results is not None
        return self.results

    def _derive(self, ok: bool, refused: bool) -> None:
        """The results of what the run recorded (once a lane has a server recorded), however it ended:
        after a complete run (`ok`) its derived files go first and a derivation error is raised; after
        a failure the error already on its way out is the one to report. A `refused` resume says which
        SHA256SUMS entries its rewrite made stale."""
        if self.manifest.provenance is not None and self.manifest.provenance.lanes:
            try:
                if ok:  # a Ctrl-C from here on leaves run.json complete and no stale derived file
                    clear_derived(self.run_dir)
                self.results = self.derivation.derive(self.run_dir)
            except SatbenchError:
                if ok:
                    raise  # else the error already on its way out is the one to report
        rewritten = ["run.json", "results.json"]  # by the refusal: a reported run's bundle is stale
        if refused and (note := self.derivation.stale_note(self.run_dir, rewritten)):
            print(note, file=sys.stderr)

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
        gpus, host = self._host or this_host()
        if self.manifest.provenance is None:
            commit, changed = satbench_source()
            self.ledger.keep_provenance(Provenance(
                satbench_version=satbench.__version__, satbench_commit=commit,
                satbench_modified_files=changed, host=host, event_loop=eventloop.running_loop_name()))
        else:
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
        self._servers = LaneServers(self.cfg, self.run_dir, self.ledger, self.session, self._models,
                                    self._secrets, self.nonce, self.liveness_timeout_s, samples, gpus)
        try:
            await run_scenarios(SweepContext(
                cfg=self.cfg, run_dir=self.run_dir, ledger=self.ledger, failures=self.failures,
                progress=self.progress, nonce=self.nonce, session=self.session, derivation=self.derivation,
                events=events, samples=samples, gpus=gpus, start=self._start, stop=self._stop,
                log_path=self._servers.log_path))
        finally:
            try:
                events.close()
            finally:
                try:
                    samples.close()
                finally:
                    self.progress.end()

    async def _start(self, lane: LaneConfig, scenario: Scenario, restart: int = 0) -> LaneSession:
        """Every scenario's server start (`LaneServers.start`)."""
        assert self._servers is not None
        return await self._servers.start(lane, scenario, restart)

    async def _stop(self, session: LaneSession) -> None:
        """Every scenario's server stop (`LaneServers.stop`)."""
        await LaneServers.stop(session)


async def run_scenarios(ctx: SweepContext) -> None:
    """Every lane's fairness checks (first, when `checks_first`) and solo scenario, one lane after the
    other, then the together scenario, then the fairness checks that come after; raises the error of
    a run that measured nothing at all."""
    cfg = ctx.cfg
    checked = [lane for lane in cfg.lanes if cfg.with_fairness or cfg.fairness_only]
    first = [lane for lane in checked if cfg.fairness_only or checks_first(lane)]
    fairness = Fairness(ctx)
    for lane in cfg.lanes:
        if lane in first:  # before its sweep: they cap its climb, and stop at the first that fails
            await fairness.run(lane, stop_at_fail=not cfg.fairness_only)
        if not cfg.fairness_only:
            try:
                await solo(ctx, lane)
            except RuntimeStartError as exc:
                ctx.lane_did_not_start(lane, "solo", exc)
    if cfg.together and not cfg.fairness_only:
        await Together(ctx).run()
    for lane in checked:
        if lane not in first:
            await fairness.run(lane)
    if (error := ctx.failures.nothing_measured_error()) is not None:  # nothing at all was measured
        raise error
