"""Capability names each lane's workload profile and refuses a lane configured for other traffic than
the one measured (capability/checks.py workload_diff), in one line naming both, unless
--accept-workload: then it advertises, says so (`workload_accepted`, a note) and the LiteLLM
model_info carries the profile. On the committed dense + V4 bundle's recommendations, no server."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
import yaml

from satbench.capability.identity import NodeBlock
from satbench.capability.node import NodeLane
from satbench.capability.report import CapabilityReport, LaneCapability, capability_report, render_litellm
from satbench.cli.args import build_parser
from satbench.config.schema import RunConfig
from satbench.config.workload import ChatWorkload, WorkloadConfig
from satbench.config.workload_profile import profile_of
from satbench.records.manifest import HostInfo

BUNDLE = Path(__file__).resolve().parents[2] / "evidence" / "cpu-2core-2026-12-01" / "run"
NOW = dt.datetime(2026, 12, 2, tzinfo=dt.timezone.utc)
CHAT = WorkloadConfig(endpoint="chat", chat=ChatWorkload(turns=4), prompt_tokens=64, output_tokens=32)


def report(tmp_path: Path, measured: WorkloadConfig | None, configured: WorkloadConfig | None = None,
           accept: bool = False) -> dict[str, LaneCapability]:
    """The capability report on the measuring machine, the dense lane's recommendation measured with
    `measured` (None: as schema 1.14 wrote it, without a workload) and configured with `configured`
    (None: as the run was)."""
    run = json.loads((BUNDLE / "run.json").read_text())
    recs = json.loads((BUNDLE / "recommendations.json").read_text())
    recs["schema_version"] = "1.15" if measured is not None else "1.14"
    for rec in recs["lanes"]:
        rec["workload"] = profile_of(measured if rec["lane"] == "dense" and measured is not None
                                     else WorkloadConfig()).model_dump()
        if measured is None:
            del rec["workload"]
    path = tmp_path / "recommendations.json"
    path.write_text(json.dumps(recs))
    cfg = RunConfig.model_validate(run["config"])
    if configured is not None:
        cfg.lanes[0] = cfg.lanes[0].model_copy(update={"workload": configured})
    nodes = [NodeLane(lane=r["lane"], model_path=r["model"]["path"], model_sha256=r["model"]["sha256"],
                      runtime_kind=r["runtime"]["kind"], runtime_build=str(r["runtime"]["build_number"]))
             for r in recs["lanes"]]
    block = NodeBlock(node_id="node-a", hostname="node-a", addresses=["192.0.2.10"], api_base={})
    rep = capability_report(cfg, path, dt.timedelta(days=30), nodes=nodes,
                            host=HostInfo.model_validate(run["provenance"]["host"]), now=NOW, block=block,
                            accept_workload=accept)
    CapabilityReport.model_validate_json(rep.model_dump_json())  # what it writes reads back
    return {lane.lane: lane for lane in rep.lanes}


def test_the_same_workload_is_advertised_and_named(tmp_path):
    by = report(tmp_path, WorkloadConfig())
    assert by["dense"].status == "measured", by["dense"].reason
    assert by["dense"].workload == profile_of(WorkloadConfig()) and not by["dense"].workload_accepted


def test_a_chat_measured_lane_configured_random_is_refused_naming_both(tmp_path):
    by = report(tmp_path, CHAT)
    dense = by["dense"]
    assert dense.status == "unmeasured" and dense.max_concurrency == 1
    assert dense.reason == (
        "measured with workload chat:4 (prompt 64, output 32 tokens), this node's lane is configured "
        "random (prompt 64, output 32 tokens) (kind chat, not random): its figures hold for the measured "
        "traffic; measure this workload, or pass --accept-workload")
    assert "\n" not in dense.reason
    assert dense.workload is not None and dense.workload.kind == "chat"  # what was measured, still named
    assert by["v4"].status == "measured"  # the other lane is not touched


def test_a_random_measured_lane_configured_chat_is_refused(tmp_path):
    dense = report(tmp_path, WorkloadConfig(), configured=CHAT)["dense"]
    assert dense.status == "unmeasured"
    assert dense.reason is not None and dense.reason.startswith(
        "measured with workload random (prompt 64, output 32 tokens), this node's lane is configured "
        "chat:4 (prompt 64, output 32 tokens) (kind random, not chat)")


def test_another_chat_shape_is_another_workload(tmp_path):
    six = CHAT.model_copy(update={"chat": ChatWorkload(turns=6)})
    dense = report(tmp_path, CHAT, configured=six)["dense"]
    assert dense.status == "unmeasured" and "(chat turns 4, not 6)" in str(dense.reason)
    assert report(tmp_path, CHAT, configured=CHAT)["dense"].status == "measured"


def test_other_lengths_alone_are_not_refused(tmp_path):
    """Prompt and output lengths are described, not compared (docs/definitions.md#not-compared)."""
    dense = report(tmp_path, WorkloadConfig(), configured=WorkloadConfig(prompt_tokens=512))["dense"]
    assert dense.status == "measured", dense.reason


@pytest.mark.parametrize("measured, configured", [(CHAT, None), (WorkloadConfig(), CHAT)])
def test_accept_workload_advertises_and_says_so(tmp_path, measured, configured):
    dense = report(tmp_path, measured, configured, accept=True)["dense"]
    assert dense.status == "measured" and dense.max_concurrency == 4 and dense.workload_accepted
    (note,) = [n for n in dense.notes
               if n.startswith("accepted by --accept-workload: measured with workload ")]
    assert dense.workload == profile_of(measured) and "this node's lane is configured" in note


def test_the_litellm_model_info_carries_the_profile(tmp_path):
    run = report(tmp_path, CHAT, accept=True)
    rep = CapabilityReport(generated_at=NOW.isoformat(), hardware_fingerprint="f" * 64,
                           hardware=HostInfo.model_validate(json.loads((BUNDLE / "run.json").read_text())
                                                            ["provenance"]["host"]),
                           node=NodeBlock(node_id="node-a", hostname="node-a", addresses=[], api_base={}),
                           lanes=list(run.values()))
    info = {d["model_name"]: d["model_info"] for d in yaml.safe_load(render_litellm(rep))["model_list"]}
    assert info["dense"]["satbench_workload"] == {
        "kind": "chat", "text": "chat:4", "prompt_lengths": "64", "output_lengths": "32", "chat_turns": 4,
        "chat_think_s": 0.0, "system_prompt_tokens": 0}
    assert info["dense"]["satbench_workload_accepted"] is True
    assert info["v4"]["satbench_workload"]["text"] == "random"
    assert "satbench_workload_accepted" not in info["v4"]


def test_an_old_file_reads_as_random_and_a_chat_lane_refuses_it(tmp_path):
    """A 1.14 file did not record its workload: random, its lengths unknown; a lane
    configured for chat refuses it and says how to record it."""
    assert report(tmp_path, None)["dense"].status == "measured"
    dense = report(tmp_path, None, configured=CHAT)["dense"]
    assert dense.status == "unmeasured" and dense.reason is not None
    assert dense.reason.startswith("measured with workload random (not recorded by this file's satbench: "
                                   "read as random; `satbench recommend` on its run directory records it)")


def test_an_unmeasured_lane_cannot_claim_an_accepted_workload():
    with pytest.raises(ValueError, match="workload_accepted"):
        LaneCapability(lane="x", status="unmeasured", reason="r", model_path=None, model_sha256=None,
                       max_concurrency=1, workload_accepted=True)


def test_the_capability_command_takes_accept_workload():
    parse = build_parser().parse_args
    assert parse(["capability", "--recommendations", "r.json", "--accept-workload"]).accept_workload is True
    assert parse(["capability", "--recommendations", "r.json"]).accept_workload is False


def test_the_api_passes_accept_workload_on(monkeypatch, tmp_path):
    """satbench.api.capability (what the command calls) hands the flag to the report, and refuses a
    non-bool as it does accept_contended."""
    import satbench.capability.report as report_module
    from satbench import api
    from satbench.errors import UserError

    seen = {}
    monkeypatch.setattr(report_module, "capability_report", lambda *a, **kw: seen.update(kw) or "report")
    cfg = RunConfig.model_validate(json.loads((BUNDLE / "run.json").read_text())["config"])
    path = tmp_path / "r.json"
    path.write_text("{}")
    assert api.capability(cfg, path, accept_workload=True) == "report" and seen["accept_workload"] is True
    with pytest.raises(UserError, match="accept_workload"):
        api.capability(cfg, path, accept_workload="yes")  # type: ignore[arg-type]


def test_the_capability_command_takes_the_lanes_traffic_as_flags():
    """Without a lane file, capability's single-lane flags say the traffic the lane is configured for
    (cli/lanekeys TRAFFIC_FIELDS): a chat-measured lane can then be checked against chat, while the
    knobs of a measurement (levels, lengths) stay sweep's."""
    from satbench.cli.args import lanes_config
    from satbench.errors import UserError

    a = build_parser().parse_args(["capability", "--recommendations", "r.json", "--workload", "chat:4",
                                   "--system-prompt-tokens", "256"])
    workload = lanes_config(a).lanes[0].workload
    assert workload.kind_text == "chat:4,system=256" and workload.endpoint == "chat"
    assert profile_of(workload).text == "chat:4,system=256"
    with pytest.raises(UserError, match="unrecognized arguments: --concurrency"):
        build_parser().parse_args(["capability", "--recommendations", "r.json", "--concurrency", "1,2"])
