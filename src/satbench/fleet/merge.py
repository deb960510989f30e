"""Per-node capability reports merged into one fleet: each report read and checked, or refused with
the reason (`merge_reports`).

A report is refused when it is
- foreign: not a regular file, not JSON (or JSON with a key twice in one object, where the last would
  win unseen), not a satbench capability report (no `schema_version`, or
  another major version), written before the node block (capability schema below 1.4) or by a newer
  satbench, or failing the published capability schema (an earlier minor from 1.4 on is read under
  the current one, the fields it lacks null). Every field is checked as it is read, by the report's
  own model (capability.report): a lane name by satbench's lane-name rule, every api_base by its one
  form (capability.identity.api_base_problem), times as ISO 8601, figures by their ranges and by the
  lane's status (an unmeasured lane advertises 1 and no figure), so no output meets an unchecked
  value;
- stale: generated more than `max_age` ago, or a measured lane's `measured_at` is; or either dated
  more than five minutes in the future (one rule for both: `_dated`);
- not the machine it claims: its `hardware_fingerprint` is not `hardware.fingerprint_sha256` or not the
  hash of its own hardware description (HostInfo.fingerprint()); an `api_base` that is loopback or
  names a host other than the node's id, hostname or one of its recorded addresses (the fleet's own
  rules: capability.identity.api_base_problems); and, where the caller knows the node (`expected`: fleet run,
  from Ray), a hostname or Ray node id other than the one the report was written on;
- a duplicate: a node id another report has too, or a lane's api_base another node's report has too
  (two deployments that would be one server counted twice).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from collections.abc import Iterable
from pathlib import Path

import jsonschema
from pydantic import ValidationError

from satbench.capability.identity import api_base_problems
from satbench.capability.report import (
    CAPABILITY_SCHEMA_VERSION,
    CapabilityReport,
    capability_json_schema,
    timestamp,
)
from satbench.config.ranges import shown
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
        data = json.loads(raw, object_pairs_hook=_once_each)
    except _KeyTwice as exc:
        return None, digest, f"not valid JSON: key {shown(exc.args[0])} twice in one object"
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
        return None, digest, f"fails the capability schema: {_where(exc.absolute_path)}: {exc.message[:200]}"
    except ValidationError as exc:  # satbench's own ranges and rules, beyond the published schema
        first = exc.errors()[0]
        return None, digest, f"fails the capability schema: {_where(first['loc'])}: {first['msg'][:200]}"


def _where(path: Iterable[str | int]) -> str:
    """A field's place in the report (lanes.0.lane), any key that is not a plain name quoted on one line."""
    return ".".join(p if isinstance(p, str) and re.fullmatch(r"[A-Za-z0-9_]{1,64}", p) else
                    str(p) if isinstance(p, int) else shown(p) for p in path)


class _KeyTwice(ValueError):
    pass


def _once_each(pairs: list[tuple[str, object]]) -> dict:
    """A JSON object whose keys are each given once (json.loads would keep the last of two)."""
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise _KeyTwice(key)
        out[key] = value
    return out


def _dated(what: str, text: str, now: dt.datetime, max_age: dt.timedelta) -> str | None:
    """Why a time a report records is too old, or too far in the future, to route by, or None."""
    at = timestamp(text)
    if at - now > FUTURE_SKEW:
        return f"{what} in the future ({text}): clock or file tampered"
    if now - at > max_age:
        return f"stale: {what} {(now - at).days} days ago, the limit is {max_age.days} days"
    return None


def staleness(report: CapabilityReport, now: dt.datetime, max_age: dt.timedelta) -> str | None:
    """Why the report is too old (or dated in the future) to route by, or None: its generated_at and
    each lane's measured_at, by one rule (_dated)."""
    dates = [("generated", report.generated_at)] + [(f"lane {lane.lane} was measured", lane.measured_at)
                                                   for lane in report.lanes if lane.measured_at is not None]
    return next((why for what, text in dates if (why := _dated(what, text, now, max_age)) is not None), None)


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
