"""What every scenario of a sweep shares (`SweepContext`: the run's config, directory, ledger, writers,
GPUs, failures and derivation, and how a lane's server is started and stopped), and what the sweep
asks of the deriving side (`Derivation`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from satbench.config.schema import LaneConfig, RunConfig
from satbench.errors import LevelFailedError, RuntimeStartError
from satbench.host.gpu import NvmlGpus
from satbench.records.events import Scenario
from satbench.records.ledger import Ledger, StartScenario, solo_unit
from satbench.records.manifest import PlanDecision, RunManifest, ServerFailure
from satbench.records.writer import JsonlWriter
from satbench.run.failures import Failures
from satbench.run.fairness_traffic import FairnessJudge
from satbench.run.lane_session import LaneSession, Progress

R = TypeVar("R", covariant=True)


@dataclass(frozen=True)
class PlanTick:
    """What the sweep tells an adaptive lane's planner after each step: the lane's sweep time (s), how
    long the step took (s; None when it did not run) and the lowest level whose server failed."""

    elapsed_s: float
    last_step_s: float | None
    failed_at: int | None


class Derivation(Protocol[R]):
    """What the sweep asks of the deriving side, which `satbench.pipeline` provides: the measuring
    side never imports analysis, saturation or report. `R`: the results record `derive` returns."""

    def refine_levels(self, run_dir: Path, lane: LaneConfig) -> list[int]:
        """The extra levels --refine measures for `lane`, from the levels recorded so far."""

    def planner(self, run_dir: Path, lane: LaneConfig, slots: int | None, past_slots: bool,
                recorded: list[PlanDecision]) -> Generator[PlanDecision, PlanTick, None]:
        """`lane`'s adaptive sweep (saturation/planner.py): yields each step, is sent a PlanTick after
        it (and reads what the step recorded in `run_dir`); the `recorded` decisions come first."""

    def derive(self, run_dir: Path) -> R:
        """The results of the raw files, written to the run directory (results.json, verdicts.json)."""

    def stale_note(self, run_dir: Path, rewritten: list[str]) -> str | None:
        """A note naming the files whose SHA256SUMS entry a rewrite made stale, else None."""

    @property
    def judge(self) -> FairnessJudge:
        """The verdicts the fairness runner tops its checks up by."""


class StartServer(Protocol):
    """Start `lane`'s server for `scenario`, check it and record it in run.json (`restart`: the
    restarts after a lost server; a restart is recorded with its ServerFailure instead)."""

    def __call__(self, lane: LaneConfig, scenario: Scenario, restart: int = 0) -> Awaitable[LaneSession]: ...


@dataclass(frozen=True)
class SweepContext:
    """One session of a run as its scenarios see it. `session`: this session's index in run.json
    (0: the first); `events`, `samples`: the run's raw files; `gpus`: this machine's GPUs (None
    without NVML); `start`, `stop`: a lane's server (the sweep's, so that one place starts them);
    `log_path`: the log file of a lane's server for a scenario in this session."""

    cfg: RunConfig
    run_dir: Path
    ledger: Ledger
    failures: Failures
    progress: Progress
    nonce: str
    session: int
    derivation: Derivation[object]
    events: JsonlWriter
    samples: JsonlWriter
    gpus: NvmlGpus | None
    start: StartServer
    stop: Callable[[LaneSession], Awaitable[None]]

    log_path: Callable[[LaneConfig, str], Path]

    @property
    def manifest(self) -> RunManifest:
        """run.json as this sweep keeps it (`ledger` writes it)."""
        return self.ledger.manifest

    def lane_did_not_start(self, lane: LaneConfig, scenario: StartScenario, exc: RuntimeStartError) -> None:
        """A lane of a several-lane run whose server will not start (a URL that is down, a binary
        that exits) is recorded as a server failure and the run goes on with the other lanes, so
        what they measure is kept and recommended. A one-lane run has nothing else to measure:
        the start failure is its answer (exit 3)."""
        if len(self.cfg.lanes) == 1:
            raise exc
        self.failures.did_not_start(lane.name, scenario, self.session, exc,
                                    [self.log_path(lane, scenario), self.log_path(lane, "memory")])

    def wanted(self, lane: str, n: int, rep: int) -> bool:
        """Whether solo unit (lane, level n, repetition rep) is still to run: not done, and below
        the lane's ceiling (`Failures.ceiling`)."""
        ceiling = self.failures.ceiling(lane)
        return not self.ledger.done(solo_unit(lane, n, rep)) and (ceiling is None or n < ceiling)

    async def record_failure(self, session: LaneSession, exc: LevelFailedError, unit: str,
                             skipped: list[str]) -> ServerFailure:
        """Stop the failed server and write down what failed, why, and what will not run because of it."""
        log = session.runtime.log_path
        await self.stop(session)
        return self.failures.level_failed(exc, unit, skipped, log, self.session)
