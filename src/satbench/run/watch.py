"""Whether one lane session's server is still alive while work runs on it: the liveness watchdog
(load/liveness.py) over its requests, and the LevelFailedError that says how it was lost.
"""

from __future__ import annotations

from collections.abc import Awaitable, Coroutine
from typing import Protocol, TypeVar

from satbench.config.schema import LaneConfig
from satbench.errors import LevelFailedError
from satbench.load.liveness import (
    LivenessProbe,
    ServerUnresponsive,
    StreamActivity,
    progress_bound_s,
    run_watched,
    watch,
)
from satbench.load.sampler import ServerSampler
from satbench.records.events import Scenario
from satbench.server.base import Runtime

T = TypeVar("T")


class Answers(Protocol):
    """Whether the server still answers GET /health (with any status) within `timeout_s`."""

    def __call__(self, timeout_s: float = 5.0) -> Awaitable[bool]: ...


class ServerWatch:
    """The liveness of the server of `lane` in `scenario` (`answers`: its GET /health); `probe`
    (LivenessProbe: /slots or /health, set once the session is open) and `sampler` (its
    server_samples.jsonl writer) are the session's. Declared failed when silent for
    `liveness_timeout_s` while requests are in flight, or without progress for the progress bound
    (`progress_timeout_s`, longer at the slowest prefill seen: `prefill_ms_per_token`)."""

    def __init__(self, lane: LaneConfig, scenario: Scenario, runtime: Runtime,
                 answers: Answers, liveness_timeout_s: float,
                 progress_timeout_s: float) -> None:
        self.lane, self.scenario, self.runtime, self.answers = lane, scenario, runtime, answers
        self.liveness_timeout_s = liveness_timeout_s
        self.progress_timeout_s = progress_timeout_s
        self.prefill_ms_per_token: float | None = None
        self.probe: LivenessProbe | None = None
        self.sampler: ServerSampler | None = None

    async def _watchdog(self, activity: StreamActivity) -> str:
        """Returns when the server is to be declared failed (liveness.watch): its process is gone,
        nothing arrived on the requests in flight and its probe (LivenessProbe: /slots, or /health) was
        silent for `liveness_timeout_s`, or no token came and /slots showed no progress for
        `progress_bound_s` (`progress_timeout_s`, longer when PREFILL_BATCHES batches at the slowest
        prefill seen in this session take longer)."""
        probe = self.probe or LivenessProbe(self.answers)  # /health until the session is open
        bound = progress_bound_s(self.progress_timeout_s, self.prefill_ms_per_token, self.lane.server.n_batch)
        return await watch(activity, self.runtime.alive, probe, self.liveness_timeout_s,
                           probed=lambda: probe.path, progress_timeout_s=bound,
                           slots_progress=lambda: probe.slots_progress)

    async def watched(self, work: Coroutine[object, object, T], activity: StreamActivity) -> T:
        """`await work` (whose requests report to `activity`) under the liveness watchdog; raises
        ServerUnresponsive when the watchdog stopped it (its requests in flight are recorded), and
        the sampler's RunDirError as soon as server_samples.jsonl cannot be written (the work is
        stopped then, its requests in flight recorded), also when the work ended first."""
        sampler = self.sampler
        result = await run_watched(work, activity, self._watchdog,
                                   stop=sampler.write_failed if sampler is not None else None)
        if sampler is not None:
            sampler.check_written()
        return result

    def why_unresponsive(self, exc: ServerUnresponsive) -> str:
        """The watchdog's reason, or how the server process ended when it is gone."""
        return self.exit_words() if not self.runtime.alive() else str(exc)

    def exit_words(self) -> str:
        """How the server ended, for a failure's reason: "the server process was killed by SIGFPE
        (signal 8)", "the server process exited with status 1"."""
        ended = self.runtime.ended()
        if ended is None:
            return "the server process exited"
        return f"the server process {'was ' if ended.startswith('killed') else ''}{ended}"

    async def check_alive(self, what: str, level: int, repetition: int = 1,
                          cause: BaseException | None = None) -> None:
        """After a fairness check, or when talking to the server raised `cause`: raise
        LevelFailedError if the server died or stopped answering; return if it is well."""
        if self.runtime.alive() and await self.answers():
            return
        why = self.exit_words() if not self.runtime.alive() else "the server stopped answering"
        if cause is not None:
            why += f" ({cause.__class__.__name__}: {cause})"[:300]
        raise self.check_failed(what, level, why, repetition) from cause

    def check_failed(self, what: str, level: int, why: str, repetition: int = 1) -> LevelFailedError:
        """The LevelFailedError of a fairness check (or other work) `what` that lost its server: `why`."""
        where = what if self.scenario != "fairness" else f"fairness {what} ({level} in flight)"
        return LevelFailedError(f"lane {self.lane.name}: {where} failed: {why}", lane=self.lane.name,
                                scenario=self.scenario, level=level, repetition=repetition)
