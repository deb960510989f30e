"""Capability names the model each lane serves (its GGUF header, as found on this node) and refuses a
recommendation measured with a model of another architecture (capability/checks.py
architecture_mismatch); one recorded before the architecture was (null) is not refused for that, and
says so. The LiteLLM model_info carries the same description. On the committed dense + V4 bundle's
recommendations, no server started."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import yaml

from satbench.capability.identity import NodeBlock
from satbench.capability.node import NodeLane
from satbench.capability.report import CapabilityReport, capability_report, render_litellm
from satbench.config.schema import RunConfig
from satbench.records.manifest import HostInfo, ModelInfo

BUNDLE = Path(__file__).resolve().parents[2] / "evidence" / "cpu-2core-2026-12-01" / "run"
NOW = dt.datetime(2026, 12, 2, tzinfo=dt.timezone.utc)


def v4_file(sha256: str, path: str) -> ModelInfo:
    """The V4 lane's file as resolve_model describes it on this node."""
    return ModelInfo(path=path, sha256=sha256, size_bytes=98_000_000, synthetic=True, source="user file",
                     architecture="deepseek4", name="satbench-synthetic-deepseek4-small",
                     parameter_count=86_886_013, file_type="Q8_0", context_length=1_048_576, expert_count=16,
                     expert_used_count=2)


def report(tmp_path: Path, recorded: str | None, *, node_model: bool = True) -> CapabilityReport:
    """The capability report on the measuring machine, the V4 lane's recommendation recording
    `recorded` as its architecture (None: as a run before run.json 2.10 left it)."""
    run = json.loads((BUNDLE / "run.json").read_text())
    recs = json.loads((BUNDLE / "recommendations.json").read_text())
    for rec in recs["lanes"]:
        if rec["lane"] == "v4":
            rec["model"]["architecture"] = recorded
    path = tmp_path / "recommendations.json"
    path.write_text(json.dumps(recs))
    nodes = [NodeLane(lane=r["lane"], model_path=r["model"]["path"], model_sha256=r["model"]["sha256"],
                      runtime_kind=r["runtime"]["kind"], runtime_build=str(r["runtime"]["build_number"]),
                      model=v4_file(r["model"]["sha256"], r["model"]["path"])
                      if r["lane"] == "v4" and node_model else None)
             for r in recs["lanes"]]
    block = NodeBlock(node_id="node-a", hostname="node-a", addresses=["192.0.2.10"],
                      api_base={"dense": "http://node-a:8080/v1", "v4": "http://node-a:8081/v1"})
    return capability_report(RunConfig.model_validate(run["config"]), path, dt.timedelta(days=30),
                             nodes=nodes, host=HostInfo.model_validate(run["provenance"]["host"]), now=NOW,
                             block=block)


def lanes(rep: CapabilityReport) -> dict:
    return {lane.lane: lane for lane in rep.lanes}


def test_a_recommendation_for_another_architecture_is_refused_by_that_name(tmp_path):
    by = lanes(report(tmp_path, "deepseek2"))
    v4 = by["v4"]
    assert v4.status == "unmeasured" and v4.max_concurrency == 1
    assert v4.reason is not None and v4.reason.startswith(
        "measured with another model architecture: deepseek2 (DeepSeek V2/V3) then, deepseek4 (DeepSeek V4) "
        "in this node's file ")
    # an unmeasured lane still says what it serves, synthetic weights included
    assert v4.model_architecture == "deepseek4" and v4.synthetic_model is True
    assert by["dense"].status == "measured"  # the other lane is not touched


def test_the_same_architecture_passes_and_the_report_describes_the_file(tmp_path):
    v4 = lanes(report(tmp_path, "deepseek4"))["v4"]
    assert v4.status == "measured", v4.reason
    assert (v4.model_architecture, v4.model_file_type, v4.model_context_length, v4.model_expert_count,
            v4.model_expert_used_count, v4.model_parameter_count) == (
        "deepseek4", "Q8_0", 1_048_576, 16, 2, 86_886_013)
    assert v4.model_name == "satbench-synthetic-deepseek4-small" and v4.synthetic_model is True
    assert not any("architecture" in n for n in v4.notes)


def test_an_architecture_not_recorded_is_not_refused_but_said(tmp_path):
    by = lanes(report(tmp_path, None))
    assert by["v4"].status == "measured", by["v4"].reason
    assert any(n.startswith("architecture not recorded") for n in by["v4"].notes)
    # the file here is read all the same: what it is, is said
    assert by["v4"].model_architecture == "deepseek4"


def test_a_lane_whose_file_is_not_here_is_not_judged_by_architecture(tmp_path):
    """A url lane (no local file: the node has no model description) is matched by sha256 or path."""
    v4 = lanes(report(tmp_path, "deepseek2", node_model=False))["v4"]
    assert v4.status == "measured", v4.reason
    assert v4.model_architecture == "deepseek2"  # what was recorded, for want of the file


def test_the_litellm_model_info_carries_the_model(tmp_path):
    deployments = {d["model_name"]: d for d in yaml.safe_load(render_litellm(report(tmp_path, "deepseek4")))[
        "model_list"]}
    info = deployments["v4"]["model_info"]
    assert info["satbench_model_architecture"] == "deepseek4"
    assert info["satbench_model_architecture_label"] == "DeepSeek V4"
    assert info["satbench_model_file_type"] == "Q8_0" and info["satbench_model_parameter_count"] == 86_886_013
    assert info["satbench_model_context_length"] == 1_048_576
    assert (info["satbench_model_expert_count"], info["satbench_model_expert_used_count"]) == (16, 2)
    assert info["satbench_synthetic_weights"] is True
    assert not any("architecture" in n for n in info.get("satbench_notes", []))
    # the dense lane's description was not recorded (a run before run.json 2.10) and its file is not read
    # here (the node gives none): no satbench_model_* key is made up
    assert not any(k.startswith("satbench_model_") for k in deployments["dense"]["model_info"])
    dense_notes = deployments["dense"]["model_info"]["satbench_notes"]
    assert any(n.startswith("architecture not recorded") for n in dense_notes)
    refused = yaml.safe_load(render_litellm(report(tmp_path, "deepseek2")))["model_list"]
    info = next(d["model_info"] for d in refused if d["model_name"] == "v4")
    assert info["satbench_status"] == "unmeasured" and info["satbench_synthetic_weights"] is True
    assert info["satbench_model_architecture"] == "deepseek4"
