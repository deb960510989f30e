"""The node's capability report: what each lane may advertise, read from recommendations.json
and checked against the node as it is now. Nothing in it is a constant.

A recommendation is refused — and its lane advertised as `unmeasured` with max concurrency 1,
the most conservative admission setting — when the file is not valid JSON or fails its schema,
when it was measured on another machine (hardware fingerprint), for another model file
(sha256) or another runtime build (for a native llama-server also other executable or library
bytes, since a build compiled outside git reports no build number), when it is older than the
allowed age, or when its own numbers do not hold together (e.g. a concurrency never measured).
A url lane is also refused when its server now has another shape (slots, per-slot context) than
the one measured, or when it was measured through a remote URL from another machine (the
fingerprint recorded is then the measuring machine's, not the server's).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from importlib import metadata
from pathlib import Path
from typing import Literal, TypedDict

import jsonschema
from pydantic import Field, ValidationError

from satbench.capability.remote import remote_props
from satbench.config.schema import LaneConfig, RunConfig, Strict
from satbench.host.gpu import open_nvml
from satbench.host.hardware import describe_host
from satbench.records.artifacts import older_minor, published_schema, render
from satbench.records.manifest import HostInfo, RuntimeInfo
from satbench.saturation.recommend import LaneRecommendation, RecommendationsFile, recommendations_json_schema
from satbench.server.native import capped_output, server_binary_sha256, version_line
from satbench.server.probe import shape_of
from satbench.server.remote import served_here

CAPABILITY_SCHEMA_VERSION = "1.3"  # 1.3: lanes[] model_bytes, cache_bytes_per_slot, per_slot_ctx, slots_fit
# 1.2: lanes[].served_model; 1.1: hardware.cpu_signature, hardware.cores_usable
OLDEST_TRUSTED = "1.5"  # recommendations 1.5: throughput over whole requests (earlier: up to +44 %)
# recommendations 1.7: a p95 its samples cannot bound meets no SLO target (earlier: its max did)
SLO_TRUSTED = "1.7"
CONSERVATIVE_CONCURRENCY = 1


class NodeLane(Strict):
    """What this node runs for a lane now: model identity and runtime build."""

    lane: str
    model_path: str | None
    model_sha256: str | None
    runtime_kind: str
    runtime_build: str | None = Field(description="build number, else the version string; None if unknown")
    runtime_binary_sha256: str | None = Field(
        None, description="native lanes: sha256 over the llama-server executable and the libraries beside it")
    unreachable: str | None = Field(None, description="why a remote lane's server could not be asked "
                                                      "(/props)")
    total_slots: int | None = Field(None, description="url lanes: the slots the server reports now (/props)")
    per_slot_ctx: int | None = Field(None, description="url lanes: its per-slot context now (/props)")


class Evidence(Strict):
    recommendations_file: str
    recommendations_sha256: str
    run_id: str | None = None
    results_sha256: str | None = None


class LaneCapability(Strict):
    lane: str
    status: Literal["measured", "unmeasured"]
    reason: str | None = None
    model_path: str | None
    model_sha256: str | None
    served_model: str | None = Field(None, description="the model id a request to the lane's server names: "
                                                       "the "
                                     "configured served_model, else the id recorded when measured "
                                     "(/v1/models, llama.cpp's alias)")
    synthetic_model: bool | None = None
    max_concurrency: int
    expected_output_tok_per_s: float | None = None
    expected_p95_ttft_ms: float | None = None
    expected_p95_tpot_ms: float | None = None
    peak_rss_bytes: int | None = None
    peak_gpu_mem_bytes: int | None = None
    model_bytes: int | None = Field(None, description="the weights the server holds (its model buffers)")
    cache_bytes_per_slot: int | None = Field(None, description="KV and state cache per slot at the measured "
                                             "per-slot context (llama.cpp's buffers)")
    per_slot_ctx: int | None = None
    slots_fit: int | None = Field(None, description="slots that fit in the memory left after loading")
    measured_at: str | None = None
    evidence: Evidence | None = None


class _LaneIdentity(TypedDict):
    """The LaneCapability fields every lane has, measured or not."""

    lane: str
    model_path: str | None
    model_sha256: str | None
    served_model: str | None


class _LaneMemoryFigures(TypedDict, total=False):
    """The LaneCapability fields read from the recommendation's memory figures (none without them)."""

    model_bytes: int | None
    per_slot_ctx: int | None
    cache_bytes_per_slot: int | None
    slots_fit: int | None


class CapabilityReport(Strict):
    schema_version: str = CAPABILITY_SCHEMA_VERSION
    generated_at: str
    hardware_fingerprint: str
    hardware: HostInfo
    lanes: list[LaneCapability]


def capability_json_schema() -> dict:
    return published_schema(CapabilityReport, "capability", CAPABILITY_SCHEMA_VERSION, "capability report")


def build_id(number: int | None, version: str | None) -> str | None:
    return str(number) if number else version


def build_from_info(build_info: str | None) -> str | None:
    """A server's build as /props tells it: the number from build_info "b11434-1a2b3c4", else
    build_info itself (a llama-server compiled outside git says "b0-unknown")."""
    m = re.match(r"^b(\d+)-", build_info or "")
    return m[1] if m and m[1] != "0" else build_info


def recorded_build(rec: LaneRecommendation, node_kind: str) -> str | None:
    """The measured build, derived as the node's is: a url lane's from build_info (as
    `remote_identity` does), any other from the build number, else the version string."""
    if node_kind == "url" and rec.runtime.build_info is not None:
        return build_from_info(rec.runtime.build_info)
    return build_id(rec.runtime.build_number, rec.runtime.version)


def runtime_build_now(lane: LaneConfig) -> str | None:
    """The build this node would serve the lane with, without starting it."""
    rc = lane.runtime
    if rc.kind == "embedded":
        try:
            v = metadata.version("xllamacpp")
        except metadata.PackageNotFoundError:
            return None
        m = re.match(r"^\d+\.\d+\.(\d+)$", v)
        return m[1] if m else v
    if rc.kind == "native" and rc.server_bin:
        text = capped_output([rc.server_bin, "--version"], timeout_s=20)  # bounded; bad UTF-8 replaced
        if text is None:
            return None
        m = re.search(r"version: (\d{1,12})\b", text)
        return m[1] if m and m[1] != "0" else version_line(text, first_if_none=False)
    return None


def binary_mismatch(measured: str | None, node: NodeLane, build_known: bool = True) -> str | None:
    """A native llama-server is the same build only if its code is the same bytes: the version
    string alone cannot tell two builds apart that were compiled outside git ("0 (unknown)").
    A recommendation that recorded no binary hash (satbench before 0.1's results schema 2.3) is
    accepted on its build number, and refused when it has none (`build_known` False)."""
    if node.runtime_kind != "native":
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
    if node.runtime_kind != "url":
        return None
    for what, was, now in (("slots", measured.total_slots, node.total_slots),
                           ("per-slot context", measured.per_slot_ctx, node.per_slot_ctx)):
        if was is not None and now is None:
            return f"the lane's server does not report its {what} (/props): cannot confirm the {was} measured"
        if was is not None and now != was:
            return (f"measured with {was} {what}, the server reports {now} now (restarted with another "
                    "-np/-c?): measure it again as it runs now")
    return None


def measured_from_afar(rec: LaneRecommendation) -> str | None:
    """A url lane whose server was not on the machine that measured it: the hardware fingerprint
    recorded is the measuring machine's, not the server's, so it vouches for nothing on the node that
    serves it. A recommendation from before this was recorded: its URL must be served by this machine."""
    measured, here = rec.runtime, rec.server_on_measuring_machine
    if measured.kind != "url" or here or (here is None and served_here(measured.base_url)):
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
               max_age: dt.timedelta, host: HostInfo | None = None) -> str | None:
    """Why this recommendation may not be advertised on this node (None: it may)."""
    if rec is None:
        return "no recommendation for this lane"
    if node.unreachable:
        return f"cannot ask the lane's server what it runs: {node.unreachable}"
    if node.runtime_kind == "url" and node.model_path is None:
        return ("the lane's server does not say which model it serves (no model_path on /props): "
                "cannot confirm it")
    if (why := measured_from_afar(rec)) is not None:
        return why
    if (rec.hardware_fingerprint != host_fingerprint and host is not None
            and rec.hardware.older_scheme_of(host)):
        return ("measured on this machine, but its hardware fingerprint was computed by an earlier satbench "
                "(another fingerprint scheme): measure again to advertise it")
    if rec.hardware_fingerprint != host_fingerprint:
        return (f"measured on another machine (fingerprint {rec.hardware_fingerprint[:16]} ≠ this node's "
                f"{host_fingerprint[:16]})")
    if node.model_sha256 is not None and rec.model.sha256 != node.model_sha256:
        return (f"measured with another model file "
                f"(sha256 {str(rec.model.sha256)[:16]} ≠ {node.model_sha256[:16]})")
    if node.model_sha256 is None and node.model_path and rec.model.path != node.model_path:
        return f"measured with another model ({rec.model.path} ≠ {node.model_path})"
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
    problems = recommendation_problems(rec)
    if problems:
        return "inconsistent recommendation (tampered?): " + "; ".join(problems)
    if rec.recommended_concurrency is None:
        return (f"the run found no safe concurrency for this lane ({rec.binding.reason}): "
                f"{rec.binding.detail}")[:600]
    return None


MAX_RECOMMENDATIONS_BYTES = 16 << 20  # one entry per lane (at most 64): a few hundred KiB at most


def load_recommendations(path: Path) -> tuple[RecommendationsFile | None, str | None, str]:
    """(file, why it is refused, its sha256)."""
    from satbench.errors import RunDirError
    from satbench.records.rundir import read_regular_file  # a regular file only: a named pipe never blocks

    try:
        raw = read_regular_file(path, MAX_RECOMMENDATIONS_BYTES, follow_links=True)
    except RunDirError as exc:
        return None, str(exc), ""
    digest = hashlib.sha256(raw).hexdigest()
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None, f"{path.name} is not valid JSON", digest
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


def identity_of(props: dict) -> tuple[str | None, str | None]:
    """(model path, build) a running server reports on /props."""
    info = props.get("build_info")
    return props.get("model_path"), build_from_info(None if info is None else str(info))


def remote_identity(lane: LaneConfig) -> tuple[str | None, str | None, str | None]:
    """(model path, build, None) a running server reports on /props, or (None, None, why) when it
    cannot be asked."""
    props, why = remote_props(lane)
    return (None, None, why) if props is None else (*identity_of(props), None)


def node_lane(lane: LaneConfig) -> NodeLane:
    """Identify the lane's model and runtime on this node (models are hashed, servers not started;
    a remote server is asked through /props, and its model is compared by path)."""
    from satbench.models.resolve import resolve_model

    if lane.runtime.kind == "url":
        props, why = remote_props(lane)
        (model_path, build), (slots, ctx) = ((None, None), (None, None)) if props is None else (
            identity_of(props), shape_of(props))
        return NodeLane(lane=lane.name, model_path=model_path, model_sha256=None, runtime_kind="url",
                        runtime_build=build, unreachable=why, total_slots=slots, per_slot_ctx=ctx)
    _path, info = resolve_model(lane.runtime.model, Path(lane.runtime.model_dir))
    binary = (server_binary_sha256(lane.runtime.server_bin)
              if lane.runtime.kind == "native" and lane.runtime.server_bin else None)
    return NodeLane(lane=lane.name, model_path=info.path, model_sha256=info.sha256,
                    runtime_kind=lane.runtime.kind, runtime_build=runtime_build_now(lane),
                    runtime_binary_sha256=binary)


def pick(recs: RecommendationsFile | None, lane: str, fingerprint: str) -> LaneRecommendation | None:
    """The lane's recommendation for this machine (a file may hold one per lane × machine), else
    the lane's first one, to be refused with the reason."""
    mine = [r for r in recs.lanes if r.lane == lane] if recs else []
    return next((r for r in mine if r.hardware_fingerprint == fingerprint), mine[0] if mine else None)


def capability_report(cfg: RunConfig, recommendations: Path, max_age: dt.timedelta,
                      nodes: list[NodeLane] | None = None, host: HostInfo | None = None,
                      now: dt.datetime | None = None) -> CapabilityReport:
    now = now or dt.datetime.now(dt.timezone.utc)
    host = host or describe_host(open_nvml())
    nodes = nodes or [node_lane(lane) for lane in cfg.lanes]
    recs, refused, digest = load_recommendations(recommendations)
    configured = {lane.name: lane.runtime.served_model for lane in cfg.lanes}
    out = []
    for node in nodes:
        rec = pick(recs, node.lane, host.fingerprint_sha256)
        # the SLO-schema refusal last: re-deriving cannot mend another machine, model or build
        why = refused or check_lane(rec, node, host.fingerprint_sha256, now, max_age, host) or \
            slo_derived_too_early(recs, rec)
        # a model id only means something to a running server's API; for a server satbench starts,
        # llama-server's alias is the measuring machine's file path
        served = configured.get(node.lane) or (
            rec.runtime.model_alias if rec is not None and rec.runtime.kind == "url" else None)
        base = _LaneIdentity(lane=node.lane, model_path=node.model_path, model_sha256=node.model_sha256,
                             served_model=served)
        if why is not None:
            out.append(LaneCapability(**base, status="unmeasured", reason=why,
                                      max_concurrency=CONSERVATIVE_CONCURRENCY))
            continue
        assert rec is not None and recs is not None and rec.expected is not None
        assert rec.recommended_concurrency is not None
        e, mem = rec.expected, rec.memory
        memory = _LaneMemoryFigures() if mem is None else _LaneMemoryFigures(
            model_bytes=mem.model_bytes, per_slot_ctx=mem.per_slot_ctx,
            cache_bytes_per_slot=mem.cache_bytes_per_slot, slots_fit=mem.slots_fit)
        out.append(LaneCapability(**memory,
            **base, status="measured", synthetic_model=rec.model.synthetic,
            max_concurrency=rec.recommended_concurrency,
            expected_output_tok_per_s=e.output_tok_per_s.value, expected_p95_ttft_ms=e.p95_ttft_ms,
            expected_p95_tpot_ms=e.p95_tpot_ms, peak_rss_bytes=e.peak_rss_bytes,
            peak_gpu_mem_bytes=e.peak_gpu_mem_bytes,
            measured_at=rec.measured_at,
            evidence=Evidence(recommendations_file=str(recommendations), recommendations_sha256=digest,
                              run_id=recs.run_id, results_sha256=recs.results_sha256),
        ))
    return CapabilityReport(generated_at=now.isoformat(timespec="seconds"),
                            hardware_fingerprint=host.fingerprint_sha256, hardware=host, lanes=out)


def render_json(report: CapabilityReport) -> str:
    return render(report)


def render_litellm(report: CapabilityReport, cfg: RunConfig) -> str:
    """A LiteLLM proxy `model_list` fragment: one deployment per lane with its concurrency cap. Its
    `model` names the lane's served model (a strict server such as vLLM answers 404 to an id it
    does not serve; llama.cpp ignores the field), else the lane's name."""
    lines = [f"# satbench capability report {report.generated_at}, node {report.hardware_fingerprint[:16]}",
             "# LiteLLM proxy config fragment: max_parallel_requests = satbench's measured recommendation;",
             f"# lanes that could not be confirmed on this node get {CONSERVATIVE_CONCURRENCY}.",
             "model_list:"]
    urls = {lane.name: lane.runtime.url for lane in cfg.lanes}
    for lane in report.lanes:
        env = "SATBENCH_" + re.sub(r"[^A-Z0-9]", "_", lane.lane.upper()) + "_API_BASE"
        base = f"{url.rstrip('/')}/v1" if (url := urls.get(lane.lane)) else f"os.environ/{env}"
        if lane.synthetic_model:
            lines.append("  # SYNTHETIC random weights: measured on a stand-in model whose output is "
                         "meaningless")
        lines += [f"  - model_name: {lane.lane}",
                  "    litellm_params:",
                  f"      model: {json.dumps('openai/' + (lane.served_model or lane.lane))}",
                  f"      api_base: {base}",
                  f"      max_parallel_requests: {lane.max_concurrency}",
                  "    model_info:",
                  f"      satbench_status: {lane.status}"]
        if lane.status == "measured":
            lines += ["      satbench_expected_output_tok_per_s: "
                      f"{_yaml_num(lane.expected_output_tok_per_s, '{:.1f}')}",
                      "      satbench_expected_p95_ttft_ms: "
                      f"{_yaml_num(lane.expected_p95_ttft_ms, '{:.0f}')}",
                      f"      satbench_measured_at: \"{lane.measured_at}\""]
            if lane.synthetic_model:
                lines.append("      satbench_synthetic_weights: true")
        else:
            lines.append(f"      satbench_reason: {json.dumps(lane.reason)}")
    return "\n".join(lines) + "\n"


def _yaml_num(value: float | None, fmt: str) -> str:
    return "null" if value is None else fmt.format(value)
