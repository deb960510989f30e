"""The merged fleet as a router reads it: the fleet capability JSON, a LiteLLM `model_list` with one
deployment per node × lane, or a Prometheus node_exporter textfile.

Every output is derived from the accepted reports alone, in the order given, so the same reports
give the same bytes (`generated_at` aside). Each value in them was checked when its report was read
(fleet.merge.read_report); an output checks nothing again.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Literal

from pydantic import Field

from satbench.capability.report import (
    LITELLM_NOTES,
    LaneCapability,
    litellm_deployment,
    litellm_yaml,
    timestamp,
)
from satbench.config.schema import Strict
from satbench.fleet.merge import MergedReport
from satbench.records.artifacts import published_schema, render

FLEET_SCHEMA_VERSION = "1.0"


class FleetNode(Strict):
    node_id: str
    hostname: str
    hardware_fingerprint: str
    ray_node_id: str | None = None
    report_file: str
    report_sha256: str
    report_generated_at: str


class Deployment(Strict):
    """One lane on one node, as the router should use it."""

    id: str = Field(description="<node>/<lane>, unique in the fleet")
    lane: str
    node_id: str
    api_base: str | None = Field(description="None: the router must be told "
                                             "(SATBENCH_<NODE>_<LANE>_API_BASE)")
    status: Literal["measured", "unmeasured"]
    reason: str | None = None
    max_concurrency: int
    served_model: str | None = None
    expected_output_tok_per_s: float | None = None
    expected_p95_ttft_ms: float | None = None
    expected_p95_tpot_ms: float | None = None
    measured_at: str | None = None
    synthetic_model: bool | None = None


class LaneTotal(Strict):
    lane: str
    nodes: int
    measured_nodes: int
    max_concurrency: int = Field(description="the sum over the lane's deployments")
    expected_output_tok_per_s: float | None = Field(description="the sum over its measured deployments")


class FleetCapability(Strict):
    schema_version: str = FLEET_SCHEMA_VERSION
    generated_at: str
    nodes: list[FleetNode]
    deployments: list[Deployment]
    lanes: list[LaneTotal]


def fleet_json_schema() -> dict:
    return published_schema(FleetCapability, "fleet", FLEET_SCHEMA_VERSION, "fleet capability")


def _deployment(m: MergedReport, lane: LaneCapability) -> Deployment:
    node = m.report.node
    return Deployment(id=f"{node.node_id}/{lane.lane}", lane=lane.lane, node_id=node.node_id,
                      api_base=node.api_base.get(lane.lane), status=lane.status, reason=lane.reason,
                      max_concurrency=lane.max_concurrency, served_model=lane.served_model,
                      expected_output_tok_per_s=lane.expected_output_tok_per_s,
                      expected_p95_ttft_ms=lane.expected_p95_ttft_ms,
                      expected_p95_tpot_ms=lane.expected_p95_tpot_ms, measured_at=lane.measured_at,
                      synthetic_model=lane.synthetic_model)


def fleet_capability(merged: list[MergedReport], now: dt.datetime) -> FleetCapability:
    deployments = [_deployment(m, lane) for m in merged for lane in m.report.lanes]
    totals = []
    for name in dict.fromkeys(d.lane for d in deployments):
        mine = [d for d in deployments if d.lane == name]
        tok = [d.expected_output_tok_per_s for d in mine
               if d.status == "measured" and d.expected_output_tok_per_s is not None]
        totals.append(LaneTotal(lane=name, nodes=len(mine),
                                measured_nodes=sum(d.status == "measured" for d in mine),
                                max_concurrency=sum(d.max_concurrency for d in mine),
                                expected_output_tok_per_s=math.fsum(tok) if tok else None))
    nodes = [FleetNode(node_id=m.report.node.node_id, hostname=m.report.node.hostname,
                       hardware_fingerprint=m.report.hardware_fingerprint,
                       ray_node_id=m.report.node.ray_node_id, report_file=m.path, report_sha256=m.sha256,
                       report_generated_at=m.report.generated_at)
             for m in merged]
    return FleetCapability(generated_at=now.isoformat(timespec="seconds"), nodes=nodes,
                           deployments=deployments, lanes=totals)


def render_fleet_json(merged: list[MergedReport], now: dt.datetime) -> str:
    return render(fleet_capability(merged, now))


def render_fleet_litellm(merged: list[MergedReport], now: dt.datetime) -> str:
    """One LiteLLM deployment per node × lane (capability.report.litellm_deployment): `model_name` the
    lane, shared across nodes; `model_info.id` `<node>/<lane>`; each its own api_base,
    max_parallel_requests and weight (its expected output tok/s), and its workload profile in
    model_info. A header line names a lane whose measured nodes ran different workloads: its weights
    then compare figures of unlike traffic."""
    header = [f"satbench fleet merge {now.isoformat(timespec='seconds')}: {len(merged)} nodes",
              "LiteLLM config: one deployment per node x lane; max_parallel_requests = satbench's measured",
              "recommendation on that node, weight = its expected output tok/s there; lanes not confirmed",
              "on a node get 1 for both.", *LITELLM_NOTES]
    synthetic = sorted({lane.lane for m in merged for lane in m.report.lanes if lane.synthetic_model})
    header += [f"lane {name}: SYNTHETIC random weights on some node (stand-in model, meaningless output)"
               for name in synthetic]
    workloads: dict[str, dict[str, None]] = {}
    for lane in (lane for m in merged for lane in m.report.lanes if lane.status == "measured"):
        if lane.workload is not None:
            workloads.setdefault(lane.lane, {})[lane.workload.text] = None
    header += [f"lane {name}: its nodes were measured with different workloads ({', '.join(texts)})"
               for name, texts in workloads.items() if len(texts) > 1]
    deployments = [litellm_deployment(m.report, lane) for m in merged for lane in m.report.lanes]
    return litellm_yaml(deployments, header)


def _label(value: str) -> str:
    """A Prometheus label value: backslash, double quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _num(value: float) -> str:
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


PROM_METRICS = [
    ("satbench_max_concurrency", "Requests at once satbench recommends for the lane on the node "
     "(1: unmeasured)",
     lambda d: d.max_concurrency),
    ("satbench_lane_measured", "1 when the lane's recommendation was confirmed on the node, else 0",
     lambda d: int(d.status == "measured")),
    ("satbench_expected_output_tokens_per_second", "Output tokens/s expected at max_concurrency",
     lambda d: d.expected_output_tok_per_s),
    ("satbench_expected_p95_ttft_seconds", "p95 time to first token expected at max_concurrency",
     lambda d: None if d.expected_p95_ttft_ms is None else d.expected_p95_ttft_ms / 1000),
    ("satbench_expected_p95_tpot_seconds", "p95 time per output token expected at max_concurrency",
     lambda d: None if d.expected_p95_tpot_ms is None else d.expected_p95_tpot_ms / 1000),
    ("satbench_measured_timestamp_seconds", "When the lane was measured (Unix time)",
     lambda d: None if d.measured_at is None else timestamp(d.measured_at).timestamp()),
]


def render_fleet_prometheus(merged: list[MergedReport], now: dt.datetime) -> str:
    """A node_exporter textfile (--collector.textfile.directory): one gauge per figure, labelled node
    and lane; a figure a deployment lacks is left out, not written as NaN."""
    fleet = fleet_capability(merged, now)
    lines = []
    for name, help_text, value_of in PROM_METRICS:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        for d in fleet.deployments:
            value = value_of(d)
            if value is not None:
                lines.append(f'{name}{{node="{_label(d.node_id)}",lane="{_label(d.lane)}"}} {_num(value)}')
    lines += ["# HELP satbench_capability_generated_timestamp_seconds When the node's capability report was "
              "written (Unix time)", "# TYPE satbench_capability_generated_timestamp_seconds gauge"]
    for n in fleet.nodes:
        at = timestamp(n.report_generated_at).timestamp()
        lines.append(f'satbench_capability_generated_timestamp_seconds{{node="{_label(n.node_id)}",'
                     f'hardware="{n.hardware_fingerprint[:16]}"}} {_num(at)}')
    return "\n".join(lines) + "\n"
