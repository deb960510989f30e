"""run.json's ledger: the units a run is made of, and the bookkeeping that writes them down.

Each unit is entered in run.json's `completed_units` the moment it finishes, and a server failure
names the unit it stopped (`server_failures[].unit`). On disk a unit is a plain string, one of:

- ``solo/LANE/N/REP``: repetition REP of level N (offered concurrency) of one lane alone;
- ``refine/LANE``: the extra levels --refine chose for the lane (each still a solo unit);
- ``together/K/REP``: the K-th level position of every lane at once, repetition REP;
- ``fairness/LANE``: the lane's calibration and fairness checks;
- ``solo/LANE/start`` and ``together/LANE/start``: a server that did not start for that scenario
  (only ever the unit of a server failure, never completed).

`UnitId` is the typed form: `str(UnitId)` is exactly the string above and `UnitId.parse` reads it
back. Lane names never hold "/" (config.schema.LANE_NAME_PATTERN), so every form is unambiguous.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from satbench.config.schema import RunConfig
from satbench.records.manifest import (
    MANIFEST_FILE,
    ClockAnchor,
    LaneProvenance,
    ModelInfo,
    NetworkInfo,
    PlanDecision,
    Provenance,
    ResumeRecord,
    RunManifest,
    RunStatus,
    RuntimeInfo,
    ServerFailure,
    write_manifest,
)
from satbench.records.rundir import free_room, hold_room

ROOM_MIN_BYTES = 1 << 20  # held for run.json's last write (a long adaptive run's run.json is ~100 KB)
UnitKind = Literal["solo", "together", "fairness", "refine", "open", "start"]
StartScenario = Literal["solo", "together"]
_START_SCENARIOS: dict[str, StartScenario] = {"solo": "solo", "together": "together"}
# units of a whole lane
_LANE_KINDS: dict[str, UnitKind] = {"fairness": "fairness", "refine": "refine", "open": "open"}


@dataclass(frozen=True)
class UnitId:
    """One ledger unit. Fields unused by a kind keep their defaults ("" or 0):

    - solo: lane, level (offered concurrency N), repetition;
    - together: level (the level *position* K, from 0), repetition;
    - fairness, refine, open (its open-loop rates, run whole): lane;
    - start: scenario (solo or together), lane.
    """

    kind: UnitKind
    lane: str = ""
    level: int = 0
    repetition: int = 0
    scenario: StartScenario | Literal[""] = ""

    @classmethod
    def solo(cls, lane: str, level: int, rep: int) -> UnitId:
        return cls("solo", lane=lane, level=level, repetition=rep)

    @classmethod
    def together(cls, step: int, rep: int) -> UnitId:
        return cls("together", level=step, repetition=rep)

    @classmethod
    def fairness(cls, lane: str) -> UnitId:
        return cls("fairness", lane=lane)

    @classmethod
    def refine(cls, lane: str) -> UnitId:
        return cls("refine", lane=lane)

    @classmethod
    def start(cls, scenario: StartScenario, lane: str) -> UnitId:
        return cls("start", lane=lane, scenario=scenario)

    @property
    def is_start(self) -> bool:
        """Whether this names a server that did not start (not a measured unit)."""
        return self.kind == "start"

    def __str__(self) -> str:
        if self.kind == "solo":
            return f"solo/{self.lane}/{self.level}/{self.repetition}"
        if self.kind == "together":
            return f"together/{self.level}/{self.repetition}"
        if self.kind == "start":
            return f"{self.scenario}/{self.lane}/start"
        return f"{self.kind}/{self.lane}"

    @classmethod
    def parse(cls, text: str) -> UnitId | None:
        """The unit whose string is `text` (`str(UnitId.parse(s)) == s` whenever it is not None);
        None for a string satbench never writes as a unit."""
        parts = text.split("/")
        unit: UnitId | None = None
        if len(parts) == 3 and parts[2] == "start" and (scenario := _START_SCENARIOS.get(parts[0])):
            unit = cls.start(scenario, parts[1])
        elif len(parts) == 4 and parts[0] == "solo" and parts[2].isdigit() and parts[3].isdigit():
            unit = cls.solo(parts[1], int(parts[2]), int(parts[3]))
        elif len(parts) == 3 and parts[0] == "together" and parts[1].isdigit() and parts[2].isdigit():
            unit = cls.together(int(parts[1]), int(parts[2]))
        elif len(parts) == 2 and (kind := _LANE_KINDS.get(parts[0])):
            unit = cls(kind, lane=parts[1])
        return unit if unit is not None and str(unit) == text else None


def solo_unit(lane: str, level: int, rep: int) -> str:
    """``solo/LANE/N/REP``: repetition `rep` of level `level` of `lane` alone."""
    return str(UnitId.solo(lane, level, rep))


def together_unit(step: int, rep: int) -> str:
    """``together/K/REP``: the `step`-th level position of every lane at once."""
    return str(UnitId.together(step, rep))


def fairness_unit(lane: str) -> str:
    """``fairness/LANE``: the lane's calibration and fairness checks, run whole."""
    return str(UnitId.fairness(lane))


def open_unit(lane: str) -> str:
    """``open/LANE``: the lane's open-loop rates, run whole (a resume runs them all again)."""
    return str(UnitId("open", lane=lane))


def refine_unit(lane: str) -> str:
    """``refine/LANE``: the extra levels --refine chose for `lane` have all run."""
    return str(UnitId.refine(lane))


def start_unit(scenario: StartScenario, lane: str) -> str:
    """``SCENARIO/LANE/start``: the unit of a server failure where the lane's server did not start."""
    return str(UnitId.start(scenario, lane))


def is_start_unit(text: str) -> bool:
    """Whether a ledger string names a server that did not start (`UnitId.is_start`)."""
    unit = UnitId.parse(text)
    return unit is not None and unit.is_start


def utc_now() -> str:
    """The time now, as run.json writes it: ISO 8601 in UTC, to the second."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


class StartedServer(Protocol):
    """What run.json records of a lane's server once it has started (a `run.lane_session.LaneSession`);
    each call returns a new object."""

    def model_info(self) -> ModelInfo: ...
    def runtime_info(self) -> RuntimeInfo: ...
    def network_info(self) -> NetworkInfo: ...


class Ledger:
    """The run.json of one run directory while a sweep writes it. Every change is written at once
    (atomically, `write_manifest`), so run.json on disk is always what --resume continues from; a
    change makes a new `manifest` (`model_copy(update=...)`), never edits the one there was.

    Invariants: a unit enters `completed_units` once, in the order it finished; the extra levels
    --refine chose for a lane are fixed once chosen (a resume runs those, never a new choice)."""

    def __init__(self, run_dir: Path, manifest: RunManifest) -> None:
        self.run_dir = run_dir
        self.manifest = manifest

    @classmethod
    def new(cls, run_dir: Path, command_line: list[str], cfg: RunConfig) -> Ledger:
        """The ledger of a run that starts now (not yet written): status running, nothing completed,
        its clock anchor (wall clock and monotonic clock, in ns) read now."""
        return cls(run_dir, RunManifest(
            run_id=run_dir.name, command_line=command_line, started_at=utc_now(),
            clock_anchor=ClockAnchor(wall_time_ns=time.time_ns(), perf_counter_ns=time.perf_counter_ns()),
            config=cfg,
        ))

    def write(self) -> None:
        """Write run.json as the manifest is now (RunDirError when it cannot be written)."""
        write_manifest(self.run_dir, self.manifest)

    def _update(self, **changes: object) -> None:
        """The manifest with `changes` (field → new value) becomes the ledger's; run.json is written."""
        self.manifest = self.manifest.model_copy(update=changes)
        self.write()

    def done(self, unit: str) -> bool:
        """Whether `unit` finished, in this session or an earlier one (what --resume skips)."""
        return unit in self.manifest.completed_units

    def complete(self, unit: str) -> None:
        """Enter a finished unit in the ledger, and write run.json."""
        self._update(completed_units=[*self.manifest.completed_units, unit])

    def any_completed(self) -> bool:
        """Whether any unit has finished, in any session."""
        return bool(self.manifest.completed_units)

    def refine_levels(self, lane: str) -> list[int] | None:
        """The extra levels --refine chose for `lane`, or None while none were chosen."""
        return self.manifest.refine_levels.get(lane)

    def keep_refine_levels(self, lane: str, levels: list[int]) -> None:
        """Fix the extra levels --refine chose for `lane` (once), and write run.json."""
        self._update(refine_levels={**self.manifest.refine_levels, lane: levels})

    def plan(self, lane: str) -> list[PlanDecision]:
        """The adaptive sweep's decisions for `lane` so far, in order (none for a fixed lane)."""
        return list(self.manifest.plan.get(lane, []))

    def keep_decision(self, lane: str, decision: PlanDecision) -> None:
        """Append a decision of `lane`'s adaptive sweep, and write run.json."""
        plan = self.manifest.plan
        self._update(plan={**plan, lane: [*plan.get(lane, []), decision]})

    def hold_room(self) -> None:
        """Hold space for run.json's last write while the run goes on (rundir.hold_room): four times
        what it takes now and at least ROOM_MIN_BYTES, else (a small disk) four or two times it."""
        path = self.run_dir / MANIFEST_FILE
        size = path.stat().st_size if path.exists() else 0
        hold_room(self.run_dir, [max(ROOM_MIN_BYTES, 4 * size), 4 * size, 2 * size])

    def finish(self, status: RunStatus, reason: str | None, finished_at: str | None) -> None:
        """Record how the run ended (status, reason, ISO-8601 end time), and write run.json, into the
        space `hold_room` kept for it (a full disk still records how the run ended)."""
        self.manifest = self.manifest.model_copy(
            update={"status": status, "status_reason": reason, "finished_at": finished_at})
        free_room(self.run_dir)
        self.write()

    def record_server(self, lane: str, scenario: str, session: int, server: StartedServer) -> None:
        """Record a lane's server that started for `scenario` in session `session`, and write run.json:
        a resume's servers by lane/scenario; the lane's provenance from its first start in the run
        (model, runtime, network: its first start other than the fairness server's, which runs first,
        replaces those two); the runtime of its together server and the runtime and network of its
        fairness server, from their latest start."""
        prov = self.manifest.provenance
        assert prov is not None
        resumes = self.manifest.resumes
        if session:
            last = resumes[-1]
            servers = {**last.servers, f"{lane}/{scenario}": server.runtime_info()}
            resumes = [*resumes[:-1], last.model_copy(update={"servers": servers})]
        rt, net = server.runtime_info(), server.network_info()
        lp = prov.lanes.get(lane)
        if lp is None:
            lp = LaneProvenance(model=server.model_info(), runtime=rt, network=net)
        elif not lp.solo_recorded():  # still its fairness server's: the latest start's, whichever
            lp = lp.model_copy(update={"runtime": rt, "network": net})
        if scenario == "together":
            lp = lp.model_copy(update={"together_runtime": rt})
        elif scenario == "fairness":
            lp = lp.model_copy(update={"fairness_runtime": rt, "fairness_network": net})
        self._update(provenance=prov.model_copy(update={"lanes": {**prov.lanes, lane: lp}}), resumes=resumes)

    def resume(self, record: ResumeRecord) -> None:
        """Open the resume session `record` (appended to `resumes`): the run is running again, with
        no reason and no end time yet; run.json is written."""
        self._update(resumes=[*self.manifest.resumes, record], status="running", status_reason=None,
                     finished_at=None)

    def keep_provenance(self, provenance: Provenance) -> None:
        """Record the run's provenance (the satbench source, the host), and write run.json."""
        self._update(provenance=provenance)

    def add_failure(self, failure: ServerFailure) -> None:
        """Enter a server failure in run.json's `server_failures`, and write run.json."""
        self._update(server_failures=[*self.manifest.server_failures, failure])

    def replace_failure(self, old: ServerFailure, new: ServerFailure) -> None:
        """Put `new` (a restart's outcome: `old.model_copy(update=...)`) where the failure `old` (that
        very record) stands in `server_failures`, and write run.json."""
        self._update(server_failures=[new if f is old else f for f in self.manifest.server_failures])
