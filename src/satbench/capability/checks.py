"""Why a recommendation may not be advertised on this node: the checks behind the capability report
(docs/definitions.md#refusals).

`load_recommendations` refuses a file that cannot be read, is not valid JSON, fails its schema or
predates OLDEST_TRUSTED (one the user named that cannot be read or is not JSON is an error
instead); `check_lane` refuses a lane's recommendation measured on another machine, for a model of
another architecture (general.architecture, as recorded and as the node's file says now), another
model file or runtime build (or llama-server binary), by a url lane's server of another shape now
or through a remote URL from another machine, one older than the allowed age, one measured with
another workload than the lane is configured with (`workload_diff`, unless accepted), or one
whose own numbers do not hold together; `slo_derived_too_early` one whose SLO bound predates SLO_TRUSTED.
Each returns the reason as text, None when the recommendation stands.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path

import jsonschema
from pydantic import ValidationError

from satbench.capability.node import NodeLane, build_from_info, build_id
from satbench.config.runtime import runtime_class
from satbench.config.workload_profile import WorkloadProfile
from satbench.gguf.architectures import described_architecture
from satbench.records.artifacts import older_minor
from satbench.records.manifest import HostInfo, RuntimeInfo
from satbench.saturation.recommendations_file import (
    LaneRecommendation,
    RecommendationsFile,
    recommendations_json_schema,
)
from satbench.server.remote import served_here

OLDEST_TRUSTED = "1.5"  # recommendations 1.5: throughput over whole requests (earlier: up to +44 %)
# recommendations 1.7: a p95 its samples cannot bound meets no SLO target (earlier: its max did)
SLO_TRUSTED = "1.7"


def recorded_build(rec: LaneRecommendation, node_kind: str) -> str | None:
    """The measured build, derived as the node's is: a url lane's from build_info (as
    `remote_identity` does), any other from the build number, else the version string."""
    if not runtime_class(node_kind).starts_server and rec.runtime.build_info is not None:
        return build_from_info(rec.runtime.build_info)
    return build_id(rec.runtime.build_number, rec.runtime.version)


def binary_mismatch(measured: str | None, node: NodeLane, build_known: bool = True) -> str | None:
    """A native llama-server is the same build only if its code is the same bytes: the version
    string alone cannot tell two builds apart that were compiled outside git ("0 (unknown)").
    A recommendation that recorded no binary hash (satbench before 0.1's results schema 2.3) is
    accepted on its build number, and refused when it has none (`build_known` False)."""
    if not node.runtime.needs_binary:
        return None
    if measured is None:
        return None if build_known else ("the recommendation records no llama-server binary hash and its "
                                         "build reports no build number: cannot confirm it is the binary "
                                         "measured")
    if node.runtime_binary_sha256 is None:
        return "cannot read this node's llama-server binary to confirm it is the one measured"
    if node.runtime_binary_sha256 != measured:
        return (f"measured with another llama-server binary (sha256 {measured[:16]} ≠ "
                f"{node.runtime_binary_sha256[:16]}), although both report {node.runtime_build!r}")
    return None


def shape_mismatch(measured: RuntimeInfo, node: NodeLane) -> str | None:
    """A url lane's server must have the shape it was measured with: its slot count and per-slot
    context (/props). Fewer slots queue what the recommendation sends at once; more slots or
    another context change the KV cache the figures were measured with. (A server satbench
    starts gets its shape from whoever deploys it, which capability cannot see.)"""
    if node.runtime.starts_server:
        return None
    for what, was, now in (("slots", measured.total_slots, node.total_slots),
                           ("per-slot context", measured.per_slot_ctx, node.per_slot_ctx)):
        if was is not None and now is None:
            return f"the lane's server does not report its {what} (/props): cannot confirm the {was} measured"
        if was is not None and now != was:
            return (f"measured with {was} {what}, the server reports {now} now (restarted with another "
                    "-np/-c?): measure it again as it runs now")
    return None


def flags_mismatch(measured: RuntimeInfo, node: NodeLane) -> str | None:
    """A server satbench starts must get the extra llama-server flags it was measured with (--server-arg,
    [lanes.server] args: flash attention, KV cache types, split mode, speculative decoding change what it
    holds and how fast); the node's lane states them as the sweep's did. Not compared for a url lane."""
    if node.extra_server_args is None or node.extra_server_args == measured.extra_server_args:
        return None
    was, now = " ".join(measured.extra_server_args) or "none", " ".join(node.extra_server_args) or "none"
    return (f"measured with extra llama-server flags {was!r}, this node's lane gives {now!r}: give the "
            "measured ones (--server-arg, [lanes.server] args) or measure these")


def architecture_mismatch(rec: LaneRecommendation, node: NodeLane) -> str | None:
    """The lane's model file here must be of the architecture measured (general.architecture, read
    from its header now). A recommendation that recorded none (before recommendations 1.12) or a
    lane whose file is not here (a url lane) is not judged by it: the sha256 or path check stands."""
    measured = rec.model.architecture
    now = node.model.architecture if node.model is not None else None
    if measured is None or now is None or measured == now:
        return None
    return (f"measured with another model architecture: {described_architecture(measured)} then, "
            f"{described_architecture(now)} in this node's file {node.model_path}")


def measured_from_afar(rec: LaneRecommendation) -> str | None:
    """A url lane whose server was not on the machine that measured it: the hardware fingerprint
    recorded is the measuring machine's, not the server's, so it vouches for nothing on the node that
    serves it. A recommendation from before this was recorded: its URL must be served by this machine."""
    measured, here = rec.runtime, rec.server_on_measuring_machine
    if measured.starts_server or here or (here is None and served_here(measured.base_url)):
        return None
    return (f"measured through a remote URL ({measured.base_url}) from another machine: the server's "
            "hardware was not seen, so the figure cannot be matched to this node; run satbench on the node "
            "itself or "
            "against its loopback URL")


def slo_derived_too_early(recs: RecommendationsFile | None, rec: LaneRecommendation | None) -> str | None:
    """A lane with an SLO whose recommendation predates SLO_TRUSTED: its SLO bound may rest on a p95
    from too few samples to bound it (the largest sample stood in for the upper CI end)."""
    if recs is None or rec is None or rec.slo is None or not older_minor(recs.schema_version, SLO_TRUSTED):
        return None
    return (f"recommendations schema {recs.schema_version} with an SLO: derived before a p95 that too few "
            f"samples cannot bound stopped meeting SLO targets ({SLO_TRUSTED}); run `satbench recommend` on "
            "its run "
            "directory again")


def recommendation_problems(rec: LaneRecommendation) -> list[str]:
    """Internal consistency: the numbers must be ones the run measured."""
    measured = {lv.concurrency: lv for lv in rec.measured_levels}
    out = []
    if rec.hardware.fingerprint() != rec.hardware_fingerprint:
        out.append("its hardware fingerprint is not the hash of its own hardware description (edited, or "
                   "written by a satbench with another fingerprint scheme)")
    if rec.recommended_concurrency is None:
        return out + (["expected figures without a recommended concurrency"]
                      if rec.expected is not None else [])
    if rec.expected is None:
        return out + ["a recommended concurrency without its expected figures"]
    if rec.recommended_concurrency not in measured:
        out.append(f"recommended concurrency {rec.recommended_concurrency} is not a measured level "
                   f"{sorted(measured)}")
    else:
        lv = measured[rec.recommended_concurrency]
        if lv.output_tok_per_s.value != rec.expected.output_tok_per_s.value:
            out.append("expected throughput differs from the measured level's")
        if lv.p95_ttft_ms != rec.expected.p95_ttft_ms or lv.p95_tpot_ms != rec.expected.p95_tpot_ms:
            out.append("expected p95 TTFT or TPOT differs from the measured level's")
    if rec.slots is not None and rec.recommended_concurrency > rec.slots:
        out.append(f"recommended concurrency {rec.recommended_concurrency} exceeds the {rec.slots} slots")
    if rec.fairness_cap is not None and rec.recommended_concurrency > rec.fairness_cap:
        out.append("recommended concurrency is above its own fairness cap")
    if rec.expected.concurrency != rec.recommended_concurrency:
        out.append("expected figures are for another concurrency")
    return out


def check_lane(rec: LaneRecommendation | None, node: NodeLane, host_fingerprint: str, now: dt.datetime,
               max_age: dt.timedelta, host: HostInfo | None = None,
               accept_contended: bool = False, configured: WorkloadProfile | None = None,
               accept_workload: bool = False) -> str | None:
    """Why this recommendation may not be advertised on this node (None: it may): the first refusal
    of, in this order, `_unconfirmable_server`, `_other_machine`, `_other_model`, `_other_runtime`,
    `_out_of_date`, `_other_workload` and `_not_advertisable`. A recommendation that rests on levels
    measured while other processes took CPU is refused unless `accept_contended`; one measured with
    another workload than `configured` (the lane's on this node; None: not compared) unless
    `accept_workload`."""
    if rec is None:
        return "no recommendation for this lane"
    checks = (lambda: _unconfirmable_server(node),
              lambda: _other_machine(rec, host_fingerprint, host),
              lambda: _other_model(rec, node),
              lambda: _other_runtime(rec, node),
              lambda: _out_of_date(rec, now, max_age),
              lambda: _other_workload(rec, configured, accept_workload),
              lambda: _not_advertisable(rec, accept_contended))
    return next((why for check in checks if (why := check()) is not None), None)


def _unconfirmable_server(node: NodeLane) -> str | None:
    """The lane's server cannot be asked what it runs, or (a url lane) does not say which model."""
    if node.unreachable:
        return f"cannot ask the lane's server what it runs: {node.unreachable}"
    if not node.runtime.starts_server and node.model_path is None:
        return ("the lane's server does not say which model it serves (no model_path on /props): "
                "cannot confirm it")
    return None


def _other_machine(rec: LaneRecommendation, host_fingerprint: str, host: HostInfo | None) -> str | None:
    """Measured through a remote URL from another machine (`measured_from_afar`), or on a machine
    whose hardware fingerprint is not this node's (`host`: this machine's description, to tell an
    earlier fingerprint scheme of the same machine)."""
    if (why := measured_from_afar(rec)) is not None:
        return why
    if (rec.hardware_fingerprint != host_fingerprint and host is not None
            and rec.hardware.older_scheme_of(host)):
        return ("measured on this machine, but its hardware fingerprint was computed by an earlier satbench "
                "(another fingerprint scheme): measure again to advertise it")
    if rec.hardware_fingerprint != host_fingerprint:
        return (f"measured on another machine (fingerprint {rec.hardware_fingerprint[:16]} ≠ this node's "
                f"{host_fingerprint[:16]})")
    return None


def _other_model(rec: LaneRecommendation, node: NodeLane) -> str | None:
    """Measured with a model of another architecture, another model file (by sha256 where the node
    knows it), or another model path."""
    if (why := architecture_mismatch(rec, node)) is not None:
        return why
    if node.model_sha256 is not None and rec.model.sha256 != node.model_sha256:
        return (f"measured with another model file "
                f"(sha256 {str(rec.model.sha256)[:16]} ≠ {node.model_sha256[:16]})")
    if node.model_sha256 is None and node.model_path and rec.model.path != node.model_path:
        return f"measured with another model ({rec.model.path} ≠ {node.model_path})"
    return None


def _other_runtime(rec: LaneRecommendation, node: NodeLane) -> str | None:
    """The node's runtime build is unknown, or the recommendation was measured with another build,
    llama-server binary, server shape or flags."""
    rec_build = recorded_build(rec, node.runtime_kind)
    if node.runtime_build is None:
        return "cannot confirm this node's runtime build"
    if rec_build != node.runtime_build:
        return f"measured with another runtime build ({rec_build} ≠ {node.runtime_build})"
    why = binary_mismatch(rec.runtime.binary_sha256, node, build_known=bool(rec.runtime.build_number))
    if why is not None:
        return why
    if (why := shape_mismatch(rec.runtime, node)) is not None:
        return why
    return flags_mismatch(rec.runtime, node)


def _out_of_date(rec: LaneRecommendation, now: dt.datetime, max_age: dt.timedelta) -> str | None:
    """The measurement time is unreadable, older than `max_age` at `now`, or more than 5 minutes in
    the future (a time without a zone is UTC)."""
    try:
        measured = dt.datetime.fromisoformat(rec.measured_at)
    except ValueError:
        return f"unreadable measurement time {rec.measured_at!r}"
    if measured.tzinfo is None:
        measured = measured.replace(tzinfo=dt.timezone.utc)
    age = now - measured
    if age > max_age:
        return f"stale: measured {age.days} days ago, the limit is {max_age.days} days"
    if age < dt.timedelta(minutes=-5):
        return "measured in the future (clock or file tampered)"
    return None


def workload_diff(rec: LaneRecommendation, configured: WorkloadProfile | None) -> str | None:
    """The one line naming the measured and the configured workload profiles and their first
    difference (`WorkloadProfile.differs`: the kind of traffic, not the lengths); None when they send
    the same traffic or `configured` is None. A file that did not record its workload reads as random
    (`NOT_RECORDED`), and the line says how to record it."""
    if configured is None or (diff := rec.workload.differs(configured)) is None:
        return None
    was = rec.workload.described() + ("" if "workload" in rec.model_fields_set else
                                      " (not recorded by this file's satbench: read as random; "
                                      "`satbench recommend` on its run directory records it)")
    return f"measured with workload {was}, this node's lane is configured {configured.described()} ({diff})"


def _other_workload(rec: LaneRecommendation, configured: WorkloadProfile | None,
                    accept_workload: bool) -> str | None:
    """Measured with another workload than the lane's configured one, and `accept_workload` not given."""
    why = workload_diff(rec, configured)
    return None if why is None or accept_workload else (
        f"{why}: its figures hold for the measured traffic; measure this workload, or pass --accept-workload")


def _not_advertisable(rec: LaneRecommendation, accept_contended: bool) -> str | None:
    """Its numbers do not hold together (`recommendation_problems`), it names no safe concurrency, or
    it was measured contended and `accept_contended` is not given."""
    problems = recommendation_problems(rec)
    if problems:
        return "inconsistent recommendation (tampered?): " + "; ".join(problems)
    if rec.recommended_concurrency is None:
        return (f"the run found no safe concurrency for this lane ({rec.binding.reason}): "
                f"{rec.binding.detail}")[:600]
    if rec.contended and not accept_contended:
        return (f"measured while other processes took CPU (contended levels "
                f"{', '.join(map(str, rec.contended_levels))}): measure again on a quiet machine, or "
                "pass --accept-contended")
    return None


MAX_RECOMMENDATIONS_BYTES = 16 << 20  # one entry per lane (at most 64): a few hundred KiB at most


def load_recommendations(path: Path, must_read: bool = False
                         ) -> tuple[RecommendationsFile | None, str | None, str]:
    """(file, why it is refused, its sha256). A file that cannot be read (missing, under a regular
    file, not a regular file, too large) or is not valid JSON (half-written) is refused with that
    reason, or with `must_read` (the file the user named) raises it as a RunDirError: one line naming
    the file, exit 5, the class of a run directory's file missing, unreadable or half-written."""
    from satbench.errors import RunDirError
    from satbench.records.rundir import read_regular_file  # a regular file only: a named pipe never blocks

    try:
        raw = read_regular_file(path, MAX_RECOMMENDATIONS_BYTES, follow_links=True)
        digest = hashlib.sha256(raw).hexdigest()
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            raise RunDirError(f"{path} is not valid JSON (half-written?)") from None
    except RunDirError as exc:
        if must_read:
            raise
        return None, str(exc), ""
    try:
        jsonschema.validate(data, recommendations_json_schema())
        recs = RecommendationsFile.model_validate(data)
    except (jsonschema.ValidationError, ValidationError) as exc:
        msg = getattr(exc, "message", None) or str(exc).splitlines()[0]
        return None, f"{path.name} fails schema validation: {msg[:200]}", digest
    if older_minor(recs.schema_version, OLDEST_TRUSTED):
        return None, (f"{path.name} is schema {recs.schema_version}, derived before throughput was taken "
                      "over whole requests (results 3.0): its expected tok/s overstates the server; run "
                      "`satbench "
                      "analyze` and `satbench recommend` on its run directory again"), digest
    return recs, None, digest
