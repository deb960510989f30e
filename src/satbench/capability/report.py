"""The node's capability report (docs/definitions.md#capability-report): what each lane may advertise,
read from recommendations.json and checked against the node as it is now. Nothing in it is a constant.

A recommendations file that cannot be read or is not valid JSON is an error (exit 5). A
recommendation is refused — and its lane advertised as `unmeasured` with max concurrency 1,
the most conservative admission setting — when the file fails its schema,
when it was measured on another machine (hardware fingerprint), for another model file
(sha256) or another runtime build (for a native llama-server also other executable or library
bytes, since a build compiled outside git reports no build number), when it is older than the
allowed age, or when its own numbers do not hold together (e.g. a concurrency never measured).
A url lane is also refused when its server now has another shape (slots, per-slot context) than
the one measured, or when it was measured through a remote URL from another machine (the
fingerprint recorded is then the measuring machine's, not the server's). A lane whose model file
here is of another architecture (general.architecture) than the one recorded is refused by that
name before its sha256 is compared. A lane configured with another workload than the one measured
(its kind, a chat's turns, a trace's file: config/workload_profile.py) is refused naming both,
unless accepted (`accept_workload`: then advertised, with `workload_accepted` and a note).

Every lane says what its model file is, from the file's GGUF header as found on this node
(architecture, name, parameter count, file type, trained context, experts, synthetic weights);
a url lane's file is on its server's machine and is not read, so those are null there.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Annotated, Literal, TypedDict

from pydantic import AfterValidator, Field, field_validator, model_validator

from satbench.capability.checks import check_lane, load_recommendations, slo_derived_too_early, workload_diff
from satbench.capability.identity import LaneName, NodeBlock, this_node
from satbench.capability.node import NodeLane, node_lane
from satbench.config.limits import MAX_CTX_TOKENS
from satbench.config.ranges import MAX_BYTES, ByteCount, IntRange, LatencyMs, Level, TokPerS, shown
from satbench.config.schema import RunConfig, Strict
from satbench.config.workload_profile import WorkloadProfile, profile_of
from satbench.gguf.architectures import architecture_label
from satbench.host.gpu import open_nvml
from satbench.host.hardware import describe_host
from satbench.records.artifacts import published_schema, render
from satbench.records.manifest import HostInfo, ModelInfo
from satbench.saturation.recommendations_file import LaneRecommendation, RecommendationsFile

CAPABILITY_SCHEMA_VERSION = "1.6"  # what each version added: docs/schemas.md
CONSERVATIVE_CONCURRENCY = 1
# a recommendation whose run predates run.json 2.10 (recommendations 1.12): not compared, and said so
NOT_RECORDED = ("architecture not recorded when measured (a run before run.json 2.10): not compared; the "
                "model file is matched by its sha256 alone")


def timestamp(text: str) -> dt.datetime:
    """A time as a report records it (ISO 8601), in UTC when it names no offset: the one reading of
    generated_at and measured_at, by the merge's age checks and by every export. ValueError when the
    text is not such a time."""
    at = dt.datetime.fromisoformat(text)
    return at if at.tzinfo else at.replace(tzinfo=dt.timezone.utc)


def _timestamp_text(text: str) -> str:
    """An ISO 8601 time of at most 64 printable ASCII characters (fromisoformat alone would take any
    separator, a newline too)."""
    try:
        if len(text) <= 64 and text.isascii() and text.isprintable():
            timestamp(text)
            return text
    except ValueError:
        pass
    raise ValueError(f"expected an ISO 8601 time, got {shown(text)}")


Timestamp = Annotated[str, AfterValidator(_timestamp_text)]
SlotCount = Annotated[int, IntRange(0, MAX_BYTES)]  # a slot holds at least a byte
CtxSize = Annotated[int, IntRange(1, MAX_CTX_TOKENS)]
# what a lane advertises beyond its concurrency: none of them for an unmeasured lane
FIGURES = ("expected_output_tok_per_s", "expected_p95_ttft_ms", "expected_p95_tpot_ms", "concurrency_range",
           "measured_at")


class Evidence(Strict):
    recommendations_file: str
    recommendations_sha256: str
    run_id: str | None = None
    results_sha256: str | None = None


class LaneCapability(Strict):
    lane: LaneName
    status: Literal["measured", "unmeasured"]
    reason: str | None = None
    model_path: str | None
    model_sha256: str | None
    served_model: str | None = Field(None, description="the model id a request to the lane's server names: "
                                                       "the "
                                     "configured served_model, else the id recorded when measured "
                                     "(/v1/models, llama.cpp's alias)")
    synthetic_model: bool | None = Field(None, description="the lane's model file holds satbench's random "
                                         "weights (satbench.synthetic): figures of a stand-in model")
    model_architecture: str | None = Field(None, description="general.architecture of the lane's model file "
                                           "(null: a url lane's file is not here and was not read)")
    model_name: str | None = Field(None, description="general.name of the lane's model file")
    model_parameter_count: int | None = None
    model_file_type: str | None = Field(None, description="llama.cpp's name of its file type: Q4_K_M, Q8_0, "
                                        "F16, ...")
    model_context_length: int | None = Field(None, description="the context the model was trained for")
    model_expert_count: int | None = Field(None, description="routed experts (null: dense, or not said)")
    model_expert_used_count: int | None = Field(None, description="experts used per token")
    notes: list[str] = Field(default_factory=list, description="what the report could not check or say, "
                             "e.g. an architecture the recommendation did not record")
    workload: WorkloadProfile | None = Field(None, description="the workload the recommendation was "
                                             "measured with, which its figures hold for (null: none read)")
    workload_accepted: bool = Field(False, description="measured with another workload than the lane's "
                                    "configured one, advertised by --accept-workload (a note names both)")
    max_concurrency: Level
    concurrency_range: tuple[Level, Level] | None = Field(
        None, description="the recommendation was not settled: the useful concurrency lies between these "
                          "levels and max_concurrency is the lower end (null: settled, or unmeasured)")
    expected_output_tok_per_s: TokPerS | None = None
    expected_p95_ttft_ms: LatencyMs | None = None
    expected_p95_tpot_ms: LatencyMs | None = None
    peak_rss_bytes: ByteCount | None = None
    peak_gpu_mem_bytes: ByteCount | None = None
    model_bytes: ByteCount | None = Field(None, description="the weights the server holds (its model "
                                          "buffers)")
    cache_bytes_per_slot: ByteCount | None = Field(None, description="KV and state cache per slot at the "
                                                   "measured per-slot context (llama.cpp's buffers)")
    per_slot_ctx: CtxSize | None = None
    slots_fit: SlotCount | None = Field(None, description="slots that fit in the memory left after loading")
    measured_at: Timestamp | None = None
    evidence: Evidence | None = None

    @model_validator(mode="after")
    def _figures_follow_status(self) -> LaneCapability:
        """The status rule a router relies on: an unmeasured lane advertises CONSERVATIVE_CONCURRENCY
        and none of FIGURES; a measured lane advertises when it was measured and an expected output
        tok/s, that and any p95 it has above 0, and a max_concurrency within its concurrency_range."""
        if self.status == "unmeasured":
            if self.max_concurrency != CONSERVATIVE_CONCURRENCY:
                raise ValueError(f"an unmeasured lane advertises max_concurrency {CONSERVATIVE_CONCURRENCY}, "
                                 f"got {self.max_concurrency}")
            if (given := [name for name in FIGURES if getattr(self, name) is not None]
                    + ["workload_accepted"] * self.workload_accepted):
                raise ValueError(f"an unmeasured lane advertises no figures, got {', '.join(given)}")
            return self
        if self.expected_output_tok_per_s is None or self.measured_at is None:
            raise ValueError("a measured lane advertises its expected_output_tok_per_s and measured_at")
        if (zero := [name for name in FIGURES[:3] if getattr(self, name) == 0]):
            raise ValueError(f"a measured lane's {zero[0]} must be above 0")
        span = self.concurrency_range
        if span is not None and not span[0] <= self.max_concurrency <= span[1]:
            raise ValueError(f"max_concurrency {self.max_concurrency} is outside its concurrency_range "
                             f"[{span[0]}, {span[1]}]")
        return self


class _LaneIdentity(TypedDict):
    """The LaneCapability fields every lane has, measured or not."""

    lane: str
    model_path: str | None
    model_sha256: str | None
    served_model: str | None
    model_architecture: str | None
    model_name: str | None
    model_parameter_count: int | None
    model_file_type: str | None
    model_context_length: int | None
    model_expert_count: int | None
    model_expert_used_count: int | None
    notes: list[str]
    workload: WorkloadProfile | None


class _LaneMemoryFigures(TypedDict, total=False):
    """The LaneCapability fields read from the recommendation's memory figures (none without them)."""

    model_bytes: int | None
    per_slot_ctx: int | None
    cache_bytes_per_slot: int | None
    slots_fit: int | None


class CapabilityReport(Strict):
    schema_version: str = CAPABILITY_SCHEMA_VERSION
    generated_at: Timestamp
    hardware_fingerprint: str
    hardware: HostInfo
    node: NodeBlock
    lanes: list[LaneCapability]

    @field_validator("lanes")
    @classmethod
    def _one_entry_per_lane(cls, lanes: list[LaneCapability]) -> list[LaneCapability]:
        """A lane appears once: a router would count a repeated one's slots again."""
        names = [lane.lane for lane in lanes]
        if (twice := sorted({n for n in names if names.count(n) > 1})):
            raise ValueError(f"lane {shown(twice[0])} appears {names.count(twice[0]):,} times: one entry "
                             "per lane")
        return lanes


def capability_json_schema() -> dict:
    return published_schema(CapabilityReport, "capability", CAPABILITY_SCHEMA_VERSION, "capability report")


def pick(recs: RecommendationsFile | None, lane: str, fingerprint: str) -> LaneRecommendation | None:
    """The lane's recommendation for this machine (a file may hold one per lane × machine), else
    the lane's first one, to be refused with the reason."""
    mine = [r for r in recs.lanes if r.lane == lane] if recs else []
    return next((r for r in mine if r.hardware_fingerprint == fingerprint), mine[0] if mine else None)


def capability_report(cfg: RunConfig, recommendations: Path, max_age: dt.timedelta,
                      nodes: list[NodeLane] | None = None, host: HostInfo | None = None,
                      now: dt.datetime | None = None, accept_contended: bool = False,
                      block: NodeBlock | None = None, accept_workload: bool = False) -> CapabilityReport:
    """Each lane's recommendation checked against this node (`nodes`: what it runs now, else asked;
    `host`: its machine, else described; `block`: its node block, else this machine's) and against
    the lane's workload in `cfg`. A recommendations file that cannot be read or is not JSON is a
    RunDirError, before anything is asked."""
    now = now or dt.datetime.now(dt.timezone.utc)
    recs, refused, digest = load_recommendations(recommendations, must_read=True)
    host = host or describe_host(open_nvml())
    nodes = nodes or [node_lane(lane) for lane in cfg.lanes]
    configured = {lane.name: lane.runtime.served_model for lane in cfg.lanes}
    workloads = {lane.name: profile_of(lane.workload) for lane in cfg.lanes}
    out = []
    for node in nodes:
        rec = pick(recs, node.lane, host.fingerprint_sha256)
        # the SLO-schema refusal last: re-deriving cannot mend another machine, model or build
        why = (refused or check_lane(rec, node, host.fingerprint_sha256, now, max_age, host, accept_contended,
                                     workloads.get(node.lane), accept_workload)
               or slo_derived_too_early(recs, rec))
        # a model id only means something to a running server's API; for a server satbench starts,
        # llama-server's alias is the measuring machine's file path
        served = configured.get(node.lane) or (
            rec.runtime.model_alias if rec is not None and not rec.runtime.starts_server else None)
        base = _identity(node, rec, served)
        if why is not None:
            out.append(LaneCapability(**base, status="unmeasured", reason=why,
                                      synthetic_model=None if node.model is None else node.model.synthetic,
                                      max_concurrency=CONSERVATIVE_CONCURRENCY))
            continue
        assert rec is not None and recs is not None and rec.expected is not None
        assert rec.recommended_concurrency is not None
        e, mem = rec.expected, rec.memory
        memory = _LaneMemoryFigures() if mem is None else _LaneMemoryFigures(
            model_bytes=mem.model_bytes, per_slot_ctx=mem.per_slot_ctx,
            cache_bytes_per_slot=mem.cache_bytes_per_slot, slots_fit=mem.slots_fit)
        if (span := rec.recommended_range) is not None:
            base["notes"] = [*base["notes"], f"not settled: the useful concurrency lies between {span[0]} "
                                             f"and {span[1]}; max_concurrency is the lower end"]
        base["notes"] = [*base["notes"], *(f"marginal fairness check (does not bind): {m}"
                                           for m in rec.fairness_marginal),
                         *(f"unverified fairness check: {m}" for m in rec.fairness_unverified)]
        if (accepted := workload_diff(rec, workloads.get(node.lane))) is not None:
            base["notes"] = [*base["notes"], f"accepted by --accept-workload: {accepted}"]
        out.append(LaneCapability(**memory,
            **base, status="measured", synthetic_model=rec.model.synthetic,
            max_concurrency=rec.recommended_concurrency, concurrency_range=rec.recommended_range,
            workload_accepted=accepted is not None,
            expected_output_tok_per_s=e.output_tok_per_s.value, expected_p95_ttft_ms=e.p95_ttft_ms,
            expected_p95_tpot_ms=e.p95_tpot_ms, peak_rss_bytes=e.peak_rss_bytes,
            peak_gpu_mem_bytes=e.peak_gpu_mem_bytes,
            measured_at=rec.measured_at,
            evidence=Evidence(recommendations_file=str(recommendations), recommendations_sha256=digest,
                              run_id=recs.run_id, results_sha256=recs.results_sha256),
        ))
    return CapabilityReport(generated_at=now.isoformat(timespec="seconds"),
                            hardware_fingerprint=host.fingerprint_sha256, hardware=host,
                            node=block or this_node(cfg.lanes), lanes=out)


def _identity(node: NodeLane, rec: LaneRecommendation | None, served: str | None) -> _LaneIdentity:
    """The lane's model as this node serves it: its file's header when the file is here, else (a url
    lane) what the recommendation recorded, whose header fields are null (the file was not read)."""
    m = node.model or (rec.model if rec is not None else ModelInfo())
    notes = []
    if rec is not None and rec.runtime.starts_server and rec.model.architecture is None:
        notes.append(NOT_RECORDED)
    return _LaneIdentity(
        lane=node.lane, model_path=node.model_path, model_sha256=node.model_sha256, served_model=served,
        model_architecture=m.architecture, model_name=m.name,
        model_parameter_count=m.parameter_count, model_file_type=m.file_type,
        model_context_length=m.context_length, model_expert_count=m.expert_count,
        model_expert_used_count=m.expert_used_count, notes=notes,
        workload=None if rec is None else rec.workload)


def render_json(report: CapabilityReport) -> str:
    return render(report)


NO_API_KEY = "no-key"  # what a LiteLLM deployment sends a node that has no --api-key (llama.cpp ignores it)
LITELLM_NOTES = [  # the header lines of every LiteLLM config satbench writes
    "LiteLLM refuses (429) a request beyond a deployment's max_parallel_requests. Its built-in",
    "routing strategies do not pick by free slots, so they refuse some requests below the lane's",
    "total too. satbench.fleet.litellm_routing.CapacityRouting (LiteLLM's Router in Python) picks",
    "by free slots and queues requests above the total instead (satbench's docs/fleet.md).",
    f"api_key {NO_API_KEY}: a node's llama-server without --api-key ignores it; where a node",
    "has one, put its key there as os.environ/NAME."]


def api_base_env(node_id: str, lane: str) -> str:
    """The environment variable a LiteLLM config reads a deployment's api_base from when satbench does
    not know it: SATBENCH_<NODE>_<LANE>_API_BASE (one per node and lane, so merged fragments never
    collide)."""
    return "SATBENCH_" + re.sub(r"[^A-Z0-9]", "_", f"{node_id}_{lane}".upper()) + "_API_BASE"


def litellm_deployment(report: CapabilityReport, lane: LaneCapability) -> dict:
    """One LiteLLM `model_list` entry: the lane on this node. `model_name` is the lane (shared by every
    node that serves it, so LiteLLM balances across them), `model_info.id` is `<node>/<lane>`,
    `max_parallel_requests` the measured recommendation, and `weight` the expected output tok/s there
    (rounded, at least 1; 1 for an unmeasured lane), so LiteLLM's weighted shuffle sends each node its
    share of the measured capacity. `api_key` is NO_API_KEY: without one LiteLLM refuses an `openai/`
    model, or sends the router host's OPENAI_API_KEY to the node. `model` names the lane's
    served model (a strict server such as vLLM answers 404 to an id it does not serve; llama.cpp
    ignores the field), else the lane's name. `model_info` also describes the model file
    (model_info_of), says when its weights are satbench's synthetic ones and, for a measured lane,
    the workload its figures hold for (`satbench_workload`: the profile's recorded fields)."""
    node = report.node
    base = node.api_base.get(lane.lane) or f"os.environ/{api_base_env(node.node_id, lane.lane)}"
    info: dict = {"id": f"{node.node_id}/{lane.lane}", "satbench_node": node.node_id,
                  "satbench_status": lane.status}
    if lane.status == "measured":
        info |= {"satbench_expected_output_tok_per_s": _rounded(lane.expected_output_tok_per_s, 1),
                 "satbench_expected_p95_ttft_ms": _rounded(lane.expected_p95_ttft_ms, 0),
                 "satbench_measured_at": lane.measured_at}
        if lane.workload is not None:
            info["satbench_workload"] = lane.workload.model_dump(mode="json", exclude_none=True)
        if lane.workload_accepted:
            info["satbench_workload_accepted"] = True
    else:
        info["satbench_reason"] = lane.reason
    if lane.synthetic_model:
        info["satbench_synthetic_weights"] = True
    info |= model_info_of(lane)
    return {"model_name": lane.lane,
            "litellm_params": {"model": "openai/" + (lane.served_model or lane.lane), "api_base": base,
                               "api_key": NO_API_KEY, "max_parallel_requests": lane.max_concurrency,
                               "weight": _weight(lane)},
            "model_info": info}


def model_info_of(lane: LaneCapability) -> dict:
    """The lane's model as its GGUF header describes it, for a LiteLLM `model_info`: the
    satbench_model_* keys it has (none for a url lane, whose file satbench does not read), with
    the architecture's human name where satbench knows one, and the report's notes."""
    known = {"satbench_model_architecture": lane.model_architecture,
             "satbench_model_architecture_label": architecture_label(lane.model_architecture),
             "satbench_model_name": lane.model_name,
             "satbench_model_parameter_count": lane.model_parameter_count,
             "satbench_model_file_type": lane.model_file_type,
             "satbench_model_context_length": lane.model_context_length,
             "satbench_model_expert_count": lane.model_expert_count,
             "satbench_model_expert_used_count": lane.model_expert_used_count}
    out: dict = {k: v for k, v in known.items() if v is not None}
    if lane.concurrency_range is not None:
        out["satbench_concurrency_range"] = list(lane.concurrency_range)
    if lane.notes:
        out["satbench_notes"] = list(lane.notes)
    return out


def litellm_yaml(deployments: list[dict], header: list[str]) -> str:
    """`model_list` written by a YAML library (a lane named yes, null or 1.5 stays a string), after
    the header's comment lines."""
    import yaml

    body = yaml.safe_dump({"model_list": deployments}, sort_keys=False, allow_unicode=True, width=100)
    return "".join(f"# {line}\n" for line in header) + body


def render_litellm(report: CapabilityReport) -> str:
    """A LiteLLM proxy `model_list` fragment: one deployment per lane of this node with its concurrency
    cap (litellm_deployment). A lane whose api_base is not known reads it from
    SATBENCH_<NODE>_<LANE>_API_BASE."""
    header = [f"satbench capability report {report.generated_at}, node {report.node.node_id} "
              f"(hardware {report.hardware_fingerprint[:16]})",
              "LiteLLM proxy config fragment: max_parallel_requests = satbench's measured recommendation;",
              f"lanes that could not be confirmed on this node get {CONSERVATIVE_CONCURRENCY}.",
              *LITELLM_NOTES]
    header += [f"lane {lane.lane}: SYNTHETIC random weights, a stand-in model whose output is meaningless"
               for lane in report.lanes if lane.synthetic_model]
    return litellm_yaml([litellm_deployment(report, lane) for lane in report.lanes], header)


def _weight(lane: LaneCapability) -> int:
    tok = lane.expected_output_tok_per_s if lane.status == "measured" else None
    return max(1, round(tok)) if tok is not None and tok == tok else 1


def _rounded(value: float | None, digits: int) -> float | int | None:
    return None if value is None else (round(value) if digits == 0 else round(value, digits))
