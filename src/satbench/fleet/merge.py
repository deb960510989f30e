"""Per-node capability reports merged into one fleet: each report read and checked, or refused with
the reason (`merge_reports`).

A report is refused when it is
- foreign: not a regular file, not JSON, not a satbench capability report (no `schema_version`, or
  another major version), written before the node block (capability schema below 1.4) or by a newer
  satbench, or failing the published capability schema (an earlier minor from 1.4 on is read under
  the current one, the fields it lacks null);
- stale: generated more than `max_age` ago, or a measured lane's `measured_at` is; or dated more than
  five minutes in the future;
- not the machine it claims: its `hardware_fingerprint` is not `hardware.fingerprint_sha256` or not the
  hash of its own hardware description (HostInfo.fingerprint()); an `api_base` that is loopback or
  names a host other than the node's id, hostname or one of its recorded addresses
  (capability.identity.api_base_problems); and, where the caller knows the node (`expected`: fleet run,
  from Ray), a hostname or Ray node id other than the one the report was written on;
- a duplicate: a node id another report has too, or a lane's api_base another node's report has too
  (two deployments that would be one server counted twice).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path

import jsonschema
from pydantic import ValidationError

from satbench.capability.identity import api_base_problems
from satbench.capability.report import CAPABILITY_SCHEMA_VERSION, CapabilityReport, capability_json_schema
from satbench.config.schema import Strict
from satbench.errors import SatbenchError, UserError
from satbench.records.artifacts import older_minor

NODE_BLOCK_SINCE = "1.4"
MAX_REPORT_BYTES = 16 << 20
FUTURE_SKEW = dt.timedelta(minutes=5)


class MergedReport(Strict):
    """One node's report as the merge accepted it."""

    path: str
    sha256: str
    report: CapabilityReport


class Refusal(Strict):
    path: str
    reason: str


class Expected(Strict):
    """What the caller knows of the node a report must come from (fleet run: Ray's view)."""

    hostname: str | None = None
    ray_node_id: str | None = None


def read_report(path: Path) -> tuple[CapabilityReport | None, str, str | None]:
    """(report, sha256, None), or (None, sha256, why it is foreign)."""
    from satbench.records.rundir import read_regular_file

    try:
        raw = read_regular_file(path, MAX_REPORT_BYTES, follow_links=True, error=UserError)
    except SatbenchError as exc:
        return None, "", str(exc)
    digest = hashlib.sha256(raw).hexdigest()
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return None, digest, "not valid JSON"
    version = data.get("schema_version") if isinstance(data, dict) else None
    if not isinstance(version, str) or "hardware_fingerprint" not in data:
        return None, digest, "not a satbench capability report (no schema_version or hardware_fingerprint)"
    if older_minor(version, NODE_BLOCK_SINCE):
        return None, digest, (f"capability schema {version}, written before the node block "
                              f"({NODE_BLOCK_SINCE}): run `satbench capability --node-id NODE` on the node "
                              "again")
    if version != CAPABILITY_SCHEMA_VERSION and not older_minor(version, CAPABILITY_SCHEMA_VERSION):
        return None, digest, (f"capability schema {version}, not {CAPABILITY_SCHEMA_VERSION}: written "
                              "by another satbench")
    # an earlier minor (from 1.4 on) is read under this one: the fields it lacks are null
    try:
        jsonschema.validate(data, capability_json_schema())
        return CapabilityReport.model_validate(data), digest, None
    except jsonschema.ValidationError as exc:
        where = ".".join(str(p) for p in exc.absolute_path)
        return None, digest, f"fails the capability schema: {where}: {exc.message[:200]}"
    except ValidationError as exc:  # satbench's own ranges and rules, beyond the published schema
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return None, digest, f"fails the capability schema: {where}: {first['msg'][:200]}"


def _when(text: str | None) -> dt.datetime | None:
    try:
        at = dt.datetime.fromisoformat(text or "")
    except ValueError:
        return None
    return at if at.tzinfo else at.replace(tzinfo=dt.timezone.utc)


def staleness(report: CapabilityReport, now: dt.datetime, max_age: dt.timedelta) -> str | None:
    """Why the report is too old (or dated in the future) to route by, or None."""
    generated = _when(report.generated_at)
    if generated is None:
        return f"unreadable generated_at {report.generated_at!r}"
    if generated - now > FUTURE_SKEW:
        return f"generated in the future ({report.generated_at}): clock or file tampered"
    if now - generated > max_age:
        return f"stale: generated {(now - generated).days} days ago, the limit is {max_age.days} days"
    for lane in report.lanes:
        measured = _when(lane.measured_at) if lane.status == "measured" else None
        if measured is not None and now - measured > max_age:
            return (f"stale: lane {lane.lane} was measured {(now - measured).days} days ago, the limit is "
                    f"{max_age.days} days")
    return None


def identity_problems(report: CapabilityReport, expected: Expected | None = None) -> list[str]:
    """Why the report's node is not the machine it claims (see the module docstring)."""
    out = []
    hw = report.hardware
    if not (report.hardware_fingerprint == hw.fingerprint_sha256 == hw.fingerprint()):
        out.append(f"its hardware fingerprint {report.hardware_fingerprint[:16]} is not the hash of its own "
                   "hardware description (edited, or copied onto another machine's report)")
    out += api_base_problems(report.node)
    if expected is not None:
        node = report.node
        if expected.hostname is not None and node.hostname != expected.hostname:
            out.append(f"written on {node.hostname}, but node {node.node_id} is {expected.hostname}")
        if expected.ray_node_id is not None and node.ray_node_id != expected.ray_node_id:
            out.append(f"written on Ray node {node.ray_node_id}, but node {node.node_id} is Ray node "
                       f"{expected.ray_node_id}")
    return out


def merge_reports(paths: list[Path], now: dt.datetime, max_age: dt.timedelta,
                  expected: dict[str, Expected] | None = None) -> tuple[list[MergedReport], list[Refusal]]:
    """Every report read and checked: (accepted, refused), each in the order given. A duplicate node id
    or (lane, api_base) refuses every report that has it."""
    accepted: list[MergedReport] = []
    refused: list[Refusal] = []
    for path in paths:
        report, digest, why = read_report(path)
        if report is None:
            refused.append(Refusal(path=str(path), reason=f"foreign: {why}"))
            continue
        problems = identity_problems(report, (expected or {}).get(report.node.node_id))
        if (stale := staleness(report, now, max_age)) is not None:
            problems.insert(0, stale)
        if problems:
            refused.append(Refusal(path=str(path), reason="; ".join(problems)))
        else:
            accepted.append(MergedReport(path=str(path), sha256=digest, report=report))
    duplicated: dict[int, list[str]] = {}  # index in `accepted` → why (the same file given twice too)
    seen_id: dict[str, int] = {}
    seen_base: dict[tuple[str, str], int] = {}

    def twice(i: int, first: int, what: str) -> None:
        duplicated.setdefault(i, []).append(f"{what} is also {accepted[first].path}'s")
        duplicated.setdefault(first, []).append(f"{what} is also {accepted[i].path}'s")

    for i, m in enumerate(accepted):
        node = m.report.node
        if (first := seen_id.setdefault(node.node_id, i)) != i:
            twice(i, first, f"node id {node.node_id}")
        for lane, url in node.api_base.items():
            if (first := seen_base.setdefault((lane, url), i)) != i:
                twice(i, first, f"lane {lane}'s api_base {url}")
    refused += [Refusal(path=accepted[i].path, reason="duplicate: " + "; ".join(why))
                for i, why in sorted(duplicated.items())]
    return [m for i, m in enumerate(accepted) if i not in duplicated], refused
