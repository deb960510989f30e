"""`satbench sweep --resume RUN_DIR`: continue an interrupted run where it stopped.

A run is a sequence of *units* (`satbench.records.ledger.UnitId`), each recorded in run.json's
`completed_units` the moment it finishes; the levels --refine chose are kept in `refine_levels`,
so a resume runs the same levels; fairness checks are re-run whole.

Resuming skips every completed unit and re-runs the others in a new *session* (run.json's
`resumes`). Raw files stay append-only; analysis uses, per unit, only the records of the latest
session that ran it (`current_session_records`). A resume is refused when anything that makes
the numbers comparable changed: the configuration (named field by field), the machine,
satbench's version, the model file or the llama.cpp build (checked when each server starts), or
the monotonic clock went back (a reboot).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from satbench.config.limits import size_text
from satbench.config.ranges import shown
from satbench.config.schema import RunConfig
from satbench.errors import RunDirError, UserError
from satbench.records.events import EVENTS_FILE, MAX_RECORD_BYTES, SAMPLES_FILE, RequestEvent
from satbench.records.ledger import Ledger, utc_now
from satbench.records.manifest import ClockAnchor, HostInfo, Provenance, ResumeRecord, RunManifest

RESUMABLE = ("interrupted", "failed", "running")  # "running": the process died without a word


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
    return [] if a == b else [f"{path}: {shown(a)} in the run, {shown(b)} now"]


def check_same_config(stored: RunConfig, given: RunConfig) -> None:
    diffs = differences(stored.model_dump(mode="json"), given.model_dump(mode="json"))
    if diffs:
        shown = "; ".join(diffs[:4]) + (f"; and {len(diffs) - 4} more" if len(diffs) > 4 else "")
        raise UserError(f"cannot resume with a different configuration: {shown} "
                        "(resume with no run flags to use the run's own)")


def never_started(m: RunManifest) -> list[str]:
    """The lanes whose server never started in any session (a complete run with one is resumable)."""
    started = m.provenance.lanes if m.provenance is not None else {}
    return [lane.name for lane in m.config.lanes if lane.name not in started]


def report_missing(run_dir: Path) -> bool:
    """Whether the run's evidence bundle is unfinished: SHA256SUMS, written last, is absent (the
    sweep removes it before deriving, so a derivation that was interrupted leaves none)."""
    from satbench.records.layout import SUMS_FILE

    return not (run_dir / SUMS_FILE).exists()


def derive_only(run_dir: Path, m: RunManifest) -> bool:
    """A complete run with every lane started whose report is missing: --resume measures nothing
    and writes the results, recommendations and report."""
    return m.status == "complete" and not never_started(m) and report_missing(run_dir)


def resumable_manifest(run_dir: Path) -> RunManifest:
    """The run to continue: one that did not end (RESUMABLE), a complete one with a lane that never
    started, or a complete one whose report is missing (`derive_only`); else UserError."""
    from satbench.records.manifest import read_manifest

    try:
        if run_dir.exists() and not run_dir.is_dir():
            raise UserError(f"--resume {run_dir}: not a directory (give the run directory)")
        if not run_dir.is_dir():
            raise UserError(f"--resume {run_dir}: no such run directory")
    except OSError as exc:
        raise UserError(f"--resume {run_dir}: {exc.strerror or exc}") from exc
    m = read_manifest(run_dir)
    resumable = m.status in RESUMABLE or (m.status == "complete" and never_started(m))
    if not resumable and not derive_only(run_dir, m):
        raise UserError(f"--resume {run_dir}: the run is {m.status}; nothing to resume")
    return m


def _why(reason: str) -> str:
    """A failure's reason without its "lane X: level N (repetition R) failed: " head."""
    return reason.split(" failed: ", 1)[1] if " failed: " in reason else reason


def not_run_again(m: RunManifest, session: int) -> list[str]:
    """What a resume (session `session`) skips because a server failed in an earlier session, one
    line per lane ("lane X: levels 8 and above are not run again: level 8 failed in session 0
    (REASON)") and one for the together scenario; failed fairness checks are run again."""
    lines = []
    for lane in m.config.lanes:
        solo = [f for f in m.server_failures if f.lane == lane.name and f.scenario == "solo" and f.level
                and f.session < session]
        if solo:
            f = min(solo, key=lambda f: (f.level, f.session))
            lines.append(f"lane {lane.name}: levels {f.level} and above are not run again: level {f.level} "
                         f"failed in session {f.session} ({_why(f.reason)})")
    together = [f for f in m.server_failures if f.scenario == "together" and f.level and f.session < session]
    if together:
        f = together[0]
        lines.append(f"the together scenario is not run again: lane {f.lane}'s level {f.level} failed in it "
                     f"in session {f.session} ({_why(f.reason)})")
    return lines


def repair_torn_tail(path: Path) -> int:
    """Cut a last line that a crash left without its newline (it was never a whole record), so
    appending continues on a line of its own. Returns the bytes removed."""
    from satbench.records.rundir import open_run_file, read_tail  # never truncate through a link

    if not os.path.lexists(path):
        return 0
    size, tail = read_tail(path, MAX_RECORD_BYTES + 1)  # a whole record is at most that long
    if not tail or tail.endswith(b"\n"):
        return 0
    if b"\n" not in tail and size > len(tail):
        raise RunDirError(f"cannot repair {path}: its last line is longer than "
                          f"{size_text(MAX_RECORD_BYTES)}; not a record satbench wrote")
    keep = size - len(tail) + tail.rfind(b"\n") + 1
    try:
        with open_run_file(path, "r+b") as fh:
            fh.truncate(keep)
    except OSError as exc:
        raise RunDirError(f"cannot repair {path}: {exc.strerror or exc}") from exc
    return size - keep


def last_stamp_ns(run_dir: Path) -> int:
    """The latest monotonic stamp already on disk (request ends and level marks)."""
    from satbench.records.events import read_events

    latest = 0
    if not (run_dir / EVENTS_FILE).exists():  # the run stopped before its first request (a bad model)
        return latest
    for r in read_events(run_dir):
        latest = max(latest, r.end_ns if isinstance(r, RequestEvent) else r.t_ns)
    return latest


def check_same_source_and_host(prov: Provenance | None, source: tuple[str | None, list[str]],
                               host: HostInfo) -> None:
    """A resume must run the satbench (commit and local changes) and the machine that measured
    the run."""
    commit, changed = source
    if prov is not None and prov.satbench_commit and commit and (
            prov.satbench_commit, prov.satbench_modified_files) != (commit, changed):
        raise UserError("cannot resume: the run was measured by satbench commit "
                        f"{prov.satbench_commit[:12]}, this is {commit[:12]}"
                        f"{' (modified)' if changed else ''}; start a new run")
    if prov is not None and prov.host.fingerprint_sha256 != host.fingerprint_sha256:
        raise UserError("cannot resume: the run was recorded by an earlier satbench (another hardware "
                        "fingerprint scheme); start a new run" if prov.host.older_scheme_of(host) else
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


def begin_session(run_dir: Path, ledger: Ledger, command_line: list[str], satbench_version: str) -> int:
    """Checks that need no server, then a new session in the ledger's run.json; returns its number."""
    m = ledger.manifest
    if m.provenance is not None and m.provenance.satbench_version != satbench_version:
        raise UserError(f"cannot resume: the run was measured by satbench {m.provenance.satbench_version}, "
                        f"this is {satbench_version}")
    now = time.perf_counter_ns()
    if last_stamp_ns(run_dir) > now:  # (a torn last line is skipped by the reader)
        raise UserError("cannot resume: the machine's monotonic clock went back since the run (a reboot?); "
                        "old and new stamps would overlap — start a new run")
    torn = sum(repair_torn_tail(run_dir / name) for name in (EVENTS_FILE, SAMPLES_FILE))
    session = len(m.resumes) + 1
    ledger.resume(ResumeRecord(
        session=session, started_at=utc_now(),
        command_line=command_line, from_status=m.status, from_reason=m.status_reason,
        clock_anchor=ClockAnchor(wall_time_ns=time.time_ns(), perf_counter_ns=now),
        units_already_complete=len(m.completed_units), torn_bytes_removed=torn))
    return session
