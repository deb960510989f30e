"""`satbench sweep --resume RUN_DIR`: continue an interrupted run where it stopped.

A run is a sequence of *units*, each recorded in run.json's ledger (`completed_units`) the
moment it finishes:

- ``solo/LANE/N/REP``: one repetition of one level of one lane alone;
- ``refine/LANE``: the extra levels chosen by --refine (each still a solo unit of its own; the
  choice is kept in run.json's `refine_levels`, so a resume runs the same levels);
- ``together/K/REP``: the K-th level of every lane at once, one repetition;
- ``fairness/LANE``: the lane's calibration and fairness checks (re-run whole: the checks
  calibrate against each other).

Resuming skips every completed unit and re-runs the others in a new *session* (run.json's
`resumes`). Raw files stay append-only: records of a unit that a crash cut short are kept,
and analysis uses, per unit, only the records of the latest session that ran it
(`current_session_records`). A resume is refused when anything that makes the numbers
comparable changed: the configuration (named field by field), the machine, satbench's version,
the model file or the llama.cpp build (checked when each server starts), or the monotonic
clock went back (a reboot: old and new stamps would overlap).
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Iterable, Sequence

from satbench.config import RunConfig
from satbench.errors import RunDirError, UserError
from satbench.events import EVENTS_FILE, SAMPLES_FILE, LevelMark, RequestEvent
from satbench.manifest import ClockAnchor, HostInfo, Provenance, ResumeRecord, RunManifest

RESUMABLE = ("interrupted", "failed", "running")  # "running": the process died without a word


def solo_unit(lane: str, level: int, rep: int) -> str:
    return f"solo/{lane}/{level}/{rep}"


def units_not_to_run(manifest: RunManifest) -> frozenset[str]:
    """Units a session of this run will not run: the finished ones, and those a server failure
    ruled out: the failed level or together step and what it skipped (a fairness check that
    lost its server is run again)."""
    out = set(manifest.completed_units)
    for f in manifest.server_failures:
        out.update(f.skipped_units)
        if f.scenario != "fairness":
            out.add(f.unit)
    return frozenset(out)


def refine_unit(lane: str) -> str:
    return f"refine/{lane}"


def together_unit(step: int, rep: int) -> str:
    return f"together/{step}/{rep}"


def fairness_unit(lane: str) -> str:
    return f"fairness/{lane}"


def differences(a: object, b: object, path: str = "") -> list[str]:
    """Every leaf where two plain JSON values differ, as 'path: A in the run, B now'."""
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for k in sorted(set(a) | set(b)):
            out += differences(a.get(k), b.get(k), f"{path}.{k}" if path else str(k))
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and all(
            isinstance(x, dict) for x in a + b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r} in the run, {b!r} now"]


def check_same_config(stored: RunConfig, given: RunConfig) -> None:
    diffs = differences(stored.model_dump(mode="json"), given.model_dump(mode="json"))
    if diffs:
        shown = "; ".join(diffs[:4]) + (f"; and {len(diffs) - 4} more" if len(diffs) > 4 else "")
        raise UserError(f"cannot resume with a different configuration: {shown} "
                        "(resume with no run flags to use the run's own)")


def resumable_manifest(run_dir: Path) -> RunManifest:
    from satbench.manifest import read_manifest

    if run_dir.exists() and not run_dir.is_dir():
        raise UserError(f"--resume {run_dir}: not a directory (give the run directory)")
    if not run_dir.is_dir():
        raise UserError(f"--resume {run_dir}: no such run directory")
    m = read_manifest(run_dir)
    never_started = [lane.name for lane in m.config.lanes if m.provenance is None or lane.name not in m.provenance.lanes]
    if m.status not in RESUMABLE and not (m.status == "complete" and never_started):
        raise UserError(f"--resume {run_dir}: the run is {m.status}; nothing to resume")
    return m


def repair_torn_tail(path: Path) -> int:
    """Cut a last line that a crash left without its newline (it was never a whole record), so
    appending continues on a line of its own. Returns the bytes removed."""
    if not path.exists():
        return 0
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return 0
    keep = data.rfind(b"\n") + 1
    try:
        with path.open("r+b") as fh:
            fh.truncate(keep)
    except OSError as exc:
        raise RunDirError(f"cannot repair {path}: {exc.strerror or exc}") from exc
    return len(data) - keep


def last_stamp_ns(run_dir: Path) -> int:
    """The latest monotonic stamp already on disk (request ends and level marks)."""
    from satbench.events import read_events

    latest = 0
    if not (run_dir / EVENTS_FILE).exists():  # the run stopped before its first request (a bad model)
        return latest
    for r in read_events(run_dir):
        latest = max(latest, r.end_ns if isinstance(r, RequestEvent) else r.t_ns)
    return latest


def check_same_source_and_host(prov: Provenance | None, source: tuple[str | None, list[str]],
                               host: HostInfo) -> None:
    """A resume must run the satbench (commit and local changes) and the machine that measured the run."""
    commit, changed = source
    if prov is not None and prov.satbench_commit and commit and (prov.satbench_commit, prov.satbench_modified_files) \
            != (commit, changed):
        raise UserError(f"cannot resume: the run was measured by satbench commit {prov.satbench_commit[:12]}, "
                        f"this is {commit[:12]}{' (modified)' if changed else ''}; start a new run")
    if prov is not None and prov.host.fingerprint_sha256 != host.fingerprint_sha256:
        raise UserError("cannot resume: the run was recorded by an earlier satbench (another hardware fingerprint "
                        "scheme); start a new run" if prov.host.older_scheme_of(host) else
                        "cannot resume on this machine: the run was measured on hardware fingerprint "
                        f"{prov.host.fingerprint_sha256[:16]}, this is {host.fingerprint_sha256[:16]}")


REFUSED = "; a resume was refused: "


def refused_session(m: RunManifest) -> ResumeRecord | None:
    """The latest session's record when it is a resume that measured nothing (refused at a server's
    first start: another build, shape or model now): no unit completed and no server failure recorded
    (one that failed, then was refused when restarted, measured and recorded), else None."""
    if not m.resumes:
        return None
    record = m.resumes[-1]
    if len(m.completed_units) != record.units_already_complete or any(
            f.session == record.session for f in m.server_failures):
        return None
    return record


def refused_reason(record: ResumeRecord, exc: Exception) -> str:
    """The run's reason after a refused resume: the one it had (without an earlier refusal's) and why."""
    before = (record.from_reason or record.from_status).split(REFUSED, 1)[0]
    return f"{before}{REFUSED}{exc}"


def begin_session(run_dir: Path, m: RunManifest, command_line: list[str], satbench_version: str) -> int:
    """Checks that need no server, then a new session in the manifest; returns its number."""
    if m.provenance is not None and m.provenance.satbench_version != satbench_version:
        raise UserError(f"cannot resume: the run was measured by satbench {m.provenance.satbench_version}, "
                        f"this is {satbench_version}")
    now = time.perf_counter_ns()
    if last_stamp_ns(run_dir) > now:  # (a torn last line is skipped by the reader)
        raise UserError("cannot resume: the machine's monotonic clock went back since the run (a reboot?); "
                        "old and new stamps would overlap — start a new run")
    torn = sum(repair_torn_tail(run_dir / name) for name in (EVENTS_FILE, SAMPLES_FILE))
    session = len(m.resumes) + 1
    m.resumes.append(ResumeRecord(
        session=session, started_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        command_line=command_line, from_status=m.status, from_reason=m.status_reason,
        clock_anchor=ClockAnchor(wall_time_ns=time.time_ns(), perf_counter_ns=now),
        units_already_complete=len(m.completed_units), torn_bytes_removed=torn))
    m.status, m.status_reason, m.finished_at = "running", None, None
    return session


def _unit_of(r: RequestEvent | LevelMark) -> tuple[str, str, int, int]:
    if r.scenario == "fairness":
        return (r.lane, "fairness", 0, 0)
    return (r.lane, r.scenario, r.level, r.repetition)


def current_session_records(records: Sequence[RequestEvent | LevelMark]) -> list[RequestEvent | LevelMark]:
    """Per unit, only the records of the latest session that ran it (a resumed unit's cut-short
    first attempt stays on disk but does not count)."""
    latest: dict[tuple, int] = {}
    for r in records:
        key = _unit_of(r)
        latest[key] = max(latest.get(key, 0), r.session)
    return [r for r in records if r.session == latest[_unit_of(r)]]


def superseded(records: Iterable[RequestEvent | LevelMark]) -> int:
    records = list(records)
    return len(records) - len(current_session_records(records))
