"""satbench's Python API: what the command line does, as functions that return the typed models.

    from satbench import api
    from satbench.config.schema import LaneConfig, RunConfig, RuntimeConfig

    cfg = RunConfig(lanes=[LaneConfig(name="gw", runtime=RuntimeConfig(kind="url", url="http://h:8080"))])
    outcome = api.sweep(cfg, "runs/gw")              # measure; results, recommendations, report
    results = api.load_results("runs/gw")            # results.json, as written
    results = api.analyze("runs/gw")                 # derived again from the raw files
    recs = api.recommend("runs/gw")                  # recommendations.json, written
    report = api.capability(cfg, "runs/gw/recommendations.json")  # what this node may advertise

`satbench sweep`, `analyze`, `recommend` and `capability` are these functions with a table printed
(satbench.cli). Every function raises satbench.errors.SatbenchError subclasses for what the CLI
prints as one line (UserError: a bad config or path; RuntimeStartError: a server that would not
start or answer; …), each with its `exit_code`. Files are written exactly as the CLI writes them.
`examples/api_sweep.py` is a whole script.
"""

from __future__ import annotations

import datetime as dt
import functools
import inspect
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from pydantic import ValidationError

from satbench.analysis.results import ResultsFile, read_results
from satbench.config.schema import REPETITIONS_NEED, NeedsError, RunConfig, idle_repetitions
from satbench.errors import UserError
from satbench.saturation.recommendations_file import RecommendationsFile

if TYPE_CHECKING:
    from satbench.capability.report import CapabilityReport
    from satbench.report.bundle import ReportFiles
    from satbench.run.lane_session import Progress
    from satbench.run.sweep import Sweep

def _config(value: object, fn: str) -> RunConfig:
    """The API's edge for a config: a RunConfig, or a dict of one, validated here whatever its maker
    (an instance made by `model_construct` or changed by `model_copy(update=...)` skipped pydantic's
    checks: it is dumped, the fields its maker set only, and validated again). Anything else, an
    invalid config, or one that cannot be dumped is a UserError of one line naming the field."""
    if isinstance(value, RunConfig):
        try:
            value = value.model_dump(exclude_unset=True, warnings=False)
        except Exception as exc:  # a crafted instance's serializer may raise anything
            raise UserError(f"satbench.api.{fn}: config: not a valid RunConfig (it cannot be read back: "
                            f"{type(exc).__name__})") from None
    if not isinstance(value, dict):
        raise UserError(f"satbench.api.{fn}: config: expected a RunConfig, got {type(value).__name__}")
    try:
        config = RunConfig.model_validate(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        needs = (first.get("ctx") or {}).get("error")
        if isinstance(needs, NeedsError):  # a lane's field that would not act: name it
            where = f"{where}.{needs.field}"
        msg = str(first["msg"]).removeprefix("Value error, ")
        raise UserError(f"satbench.api.{fn}: config.{where}: {msg}"[:300]) from None
    for i, lane in enumerate(config.lanes):
        if idle_repetitions(lane, config.together):
            raise UserError(f"satbench.api.{fn}: config.lanes.{i}.repetitions: {REPETITIONS_NEED}")
    _check_remote_files(config)
    return config


def _check_remote_files(config: RunConfig) -> None:
    """Every url lane's key file and CA file read as its run will read them (http.access: a regular
    file within MAX_API_KEY_FILE_BYTES, MAX_CA_CERT_BYTES), so a device (/dev/zero), a named pipe or
    a huge file is one UserError naming the flag before anything starts."""
    from satbench.http.access import read_key_file, tls_context_for

    for lane in config.lanes:
        rt = lane.runtime
        for path, flag in ((rt.api_key_file, "--api-key-file"), (rt.ca_cert, "--ca-cert")):
            if path:
                try:
                    read_key_file(path) if flag == "--api-key-file" else tls_context_for(rt)
                except UserError as exc:
                    where = f"lane {lane.name}: " if len(config.lanes) > 1 else ""
                    key = flag[2:].replace("-", "_")
                    raise UserError(f"{where}{flag} (lane file: {key}): {exc}") from None


def _path(value: object, name: str, fn: str) -> Path:
    """The API's edge for a path: a str or os.PathLike naming something (no NUL byte)."""
    text = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
    if not isinstance(text, str) or not text or "\0" in text:
        raise UserError(f"satbench.api.{fn}: {name}: expected a path (str or os.PathLike), got "
                        f"{type(value).__name__ if text is None else repr(text)[:40]}")
    return Path(text)


def _flag(value: object, name: str, fn: str) -> bool:
    if type(value) is not bool:
        raise UserError(f"satbench.api.{fn}: {name}: expected True or False, got {type(value).__name__}")
    return value


MAX_AGE_DAYS = 36_500  # a recommendation's age limit: a century is no limit, and timedelta holds it

P = ParamSpec("P")
R = TypeVar("R")


def _edge(fn: Callable[P, R]) -> Callable[P, R]:
    """The API's edge for its arguments' shape: a missing, unknown or repeated argument is a UserError
    of one line (Python's own TypeError would otherwise leave the API), before `fn` runs."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def checked(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise UserError(f"satbench.api.{fn.__name__}: {exc}") from None
        return fn(*args, **kwargs)

    return checked


__all__ = ["SweepOutcome", "analyze", "capability", "load_results", "prepare_sweep", "recommend", "sweep"]


@dataclass(frozen=True)
class SweepOutcome:
    """A finished sweep: its directory, results, recommendations (None when no lane has a level) and
    evidence bundle's files."""

    run_dir: Path
    results: ResultsFile
    recommendations: RecommendationsFile | None
    report: ReportFiles


@_edge
def prepare_sweep(config: RunConfig, run_dir: str | Path, *, progress: Progress | None = None,
                  command_line: Sequence[str] = ("satbench", "api"),
                  lane_file: bool | None = None) -> Sweep[ResultsFile]:
    """A new sweep of `config` into `run_dir` (which must not hold a run), every preflight passed and
    the directory made; `.run()` measures. Refusals name lanes (`lane_file`, default: more than one
    lane) or flags."""
    from satbench.pipeline import new_sweep
    from satbench.records.rundir import check_new_run_dir, prepare_run_dir
    from satbench.run.server_preflight import remote_preflight, server_preflight

    config, run_dir = _config(config, "prepare_sweep"), _path(run_dir, "run_dir", "prepare_sweep")
    remote_preflight(config)
    check_new_run_dir(run_dir)
    server_preflight(config, len(config.lanes) > 1 if lane_file is None else lane_file)
    sweep = new_sweep(config, run_dir, list(command_line), progress)
    sweep.resolve_models()  # a bad model (or URL, above) is refused before the run directory exists
    prepare_run_dir(run_dir)
    return sweep


@_edge
def sweep(config: RunConfig, run_dir: str | Path, *, progress: Progress | None = None,
          command_line: Sequence[str] = ("satbench", "api")) -> SweepOutcome:
    """Measure `config` into `run_dir`, then derive its results, recommendations and report, as
    `satbench sweep` does (progress: none unless given)."""
    from satbench.pipeline import derive_after_sweep

    config, run_dir = _config(config, "sweep"), _path(run_dir, "run_dir", "sweep")
    found = prepare_sweep(config, run_dir, progress=progress, command_line=command_line).run()
    recs: list[RecommendationsFile] = []
    files: list[ReportFiles] = []
    derive_after_sweep(run_dir, found, lambda written, _path: recs.append(written), files.append)
    return SweepOutcome(run_dir=run_dir, results=found, recommendations=recs[0] if recs else None,
                        report=files[0])


@_edge
def load_results(run_dir: str | Path) -> ResultsFile:
    """results.json as the run directory holds it (validated against its schema)."""
    return read_results(_path(run_dir, "run_dir", "load_results"))


@_edge
def analyze(run_dir: str | Path) -> ResultsFile:
    """results.json and verdicts.json derived again from the raw files, and written."""
    from satbench.pipeline import SweepDerivation
    from satbench.records.rundir import refuse_if_in_use

    run = _path(run_dir, "run_dir", "analyze")
    refuse_if_in_use(run)
    return SweepDerivation().derive(run)


@_edge
def recommend(run_dir: str | Path) -> RecommendationsFile:
    """recommendations.json from the run's results (derived first when missing), and written."""
    from satbench.pipeline import recommendations
    from satbench.records.manifest import read_manifest
    from satbench.records.rundir import refuse_if_in_use

    run = _path(run_dir, "run_dir", "recommend")
    read_manifest(run)  # a path that is no run says so
    refuse_if_in_use(run)
    return recommendations(run)[0]


@_edge
def capability(config: RunConfig, recommendations: str | Path, *, max_age_days: float = 30.0,
               accept_contended: bool = False, node_id: str | None = None,
               api_base: Sequence[str] = (), accept_workload: bool = False) -> CapabilityReport:
    """What this node may advertise per lane of `config`: its recommendations checked against the
    node now (model, build, machine, age) and against each lane's workload in `config` (refused when
    it differs, unless `accept_workload`); `api_base` as `--api-base` takes it (URL or LANE=URL)."""
    from satbench.capability.identity import this_node
    from satbench.capability.report import capability_report
    from satbench.run.server_preflight import remote_preflight

    config, recs = _config(config, "capability"), _path(recommendations, "recommendations", "capability")
    days = max_age_days if type(max_age_days) in (int, float) else None
    if days is None or not math.isfinite(days) or not 0 < days <= MAX_AGE_DAYS:
        raise UserError(f"max_age_days (--max-age-days) must be a number above 0 and at most "
                        f"{MAX_AGE_DAYS:,}, got {max_age_days!r}"[:200])
    if node_id is not None and not isinstance(node_id, str):
        raise UserError(f"satbench.api.capability: node_id: expected a str, got {type(node_id).__name__}")
    if not isinstance(api_base, (list, tuple)) or not all(isinstance(b, str) for b in api_base):
        raise UserError("satbench.api.capability: api_base: expected a sequence of str (URL or LANE=URL)")
    padded = [b for b in api_base if b != b.strip() or not b]  # what --api-base gets from a shell has none
    if padded:
        raise UserError(f"satbench.api.capability: api_base: an empty entry or one with surrounding "
                        f"whitespace: {padded[0]!r}"[:200])
    contended = _flag(accept_contended, "accept_contended", "capability")
    workload = _flag(accept_workload, "accept_workload", "capability")
    remote_preflight(config)
    node = this_node(config.lanes, node_id, list(api_base))
    return capability_report(config, recs, dt.timedelta(days=days), accept_contended=contended, block=node,
                             accept_workload=workload)
