"""A run's server failures: what failed, why, and what it rules out, kept in run.json.

A server that crashes, stops answering or fails every request at a level (or a fairness check),
or that does not start, becomes one `ServerFailure` in run.json's `server_failures`, written at
once. The run goes on without what the failure rules out:

- solo: the lane's levels at and above the failed one (its *ceiling*, the lowest failed level of
  any session); a fresh server runs what remains below;
- together: the rest of the together scenario;
- a server that did not start: that lane for that scenario (`UnitId.start`); in the session it
  failed, the together scenario is not started beside it either.

The progress bar stops expecting the requests of the units a failure skips. When the run ends
having measured nothing, the first failure is the run's error (`nothing_measured_error`).
"""

from __future__ import annotations

from pathlib import Path

from satbench.config.schema import RunConfig
from satbench.errors import LevelFailedError, RuntimeStartError, SatbenchError, ServerGoneError
from satbench.records.ledger import Ledger, StartScenario, fairness_unit, is_start_unit, start_unit
from satbench.records.manifest import RuntimeInfo, ServerFailure
from satbench.run.lane_session import Progress
from satbench.run.plan import requests_in


class Failures:
    """The server failures of the run `ledger` keeps; `cfg` is the run's configuration (for the
    requests of skipped units), `progress` the bar told of them."""

    def __init__(self, ledger: Ledger, cfg: RunConfig, progress: Progress) -> None:
        self.ledger, self.cfg, self.progress = ledger, cfg, progress

    @property
    def recorded(self) -> list[ServerFailure]:
        """Every failure of the run, of every session, in the order they happened."""
        return self.ledger.manifest.server_failures

    def add(self, failure: ServerFailure) -> ServerFailure:
        """Enter a server failure in run.json (the CLI names each one when the run ends); the
        progress bar stops expecting the units it skips."""
        self.ledger.add_failure(failure)
        self.progress.skip(requests_in(self.cfg, failure.skipped_units, self.ledger.manifest.refine_levels))
        return failure

    def level_failed(self, exc: LevelFailedError, unit: str, skipped: list[str], server_log: Path | None,
                     session: int) -> ServerFailure:
        """Record that `unit` lost its server (`exc` says which lane, scenario, level, repetition),
        the units not run because of it and the failed server's log file."""
        return self.add(ServerFailure(
            # a level's scenario
            lane=exc.lane, scenario=exc.scenario, level=exc.level,  # type: ignore[arg-type]
            repetition=exc.repetition, session=session, unit=unit, reason=str(exc),
            server_log=server_log.name if server_log is not None else None, skipped_units=skipped))

    def did_not_start(self, lane: str, scenario: StartScenario, session: int, exc: RuntimeStartError,
                      logs: list[Path]) -> ServerFailure:
        """Record that `lane`'s server did not start for `scenario`; its log is the first of `logs`
        that exists (none when no server wrote one)."""
        return self.add(ServerFailure(
            lane=lane, scenario=scenario, level=0, repetition=0, session=session,
            unit=start_unit(scenario, lane), reason=f"lane {lane}: the server did not start: {exc}",
            server_log=next((log.name for log in logs if log.exists()), None)))

    def fairness_did_not_start(self, lane: str, session: int, exc: RuntimeStartError,
                               log: Path) -> ServerFailure:
        """Record that `lane`'s fairness server did not start (its checks are run again on --resume)."""
        return self.add(ServerFailure(
            lane=lane, scenario="fairness", level=0, repetition=0, session=session,
            unit=fairness_unit(lane), reason=f"lane {lane}: the fairness server did not start: {exc}",
            server_log=log.name))

    def restarted(self, failure: ServerFailure, server: RuntimeInfo) -> None:
        """A fresh server runs the lane's remaining units after `failure` (the record `add` returned)."""
        self.ledger.replace_failure(failure, failure.model_copy(
            update={"restarted": True, "restarted_server": server}))

    def restart_failed(self, failure: ServerFailure, exc: RuntimeStartError, skipped: list[str]) -> None:
        """The fresh server after `failure` did not start: the lane's remaining units `skipped`
        are not run either (the progress bar is not told of them)."""
        self.ledger.replace_failure(failure, failure.model_copy(update={
            "reason": f"{failure.reason}; the restart failed: {exc}",
            "skipped_units": [*failure.skipped_units, *skipped]}))

    def ceiling(self, lane: str) -> int | None:
        """The lowest level at which this lane's server failed alone (this session or an earlier one):
        nothing at or above it is run again."""
        failed = [f.level for f in self.recorded if f.lane == lane and f.scenario == "solo" and f.level]
        return min(failed) if failed else None

    def blocks_together(self, session: int) -> bool:
        """Whether the together scenario is not run: a level failed in it (any session), or a lane's
        server did not start in session `session` (it is not started beside the others)."""
        return any((f.scenario == "together" and f.level) or (is_start_unit(f.unit) and f.session == session)
                   for f in self.recorded)

    def nothing_measured_error(self) -> SatbenchError | None:
        """When servers failed and no unit was completed in any session: the run's error, from the
        first failure (RuntimeStartError for a server that did not start, else ServerGoneError)."""
        if not self.recorded or self.ledger.any_completed():
            return None
        first = self.recorded[0]
        return (RuntimeStartError if is_start_unit(first.unit) else ServerGoneError)(first.reason)
