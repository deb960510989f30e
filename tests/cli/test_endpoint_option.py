"""`--endpoint` / lane-file `endpoint`: one LANE_KEYS row, the schema's values, completions by default."""

from __future__ import annotations

import pytest

from satbench.cli.args import build_parser, lane_config
from satbench.cli.lanefile import load_lane_file
from satbench.cli.lanekeys import BY_FIELD
from satbench.config.schema import LaneConfig, WorkloadConfig
from satbench.errors import UserError


def test_completions_stays_the_default():
    assert WorkloadConfig().endpoint == "completions"
    assert lane_config(build_parser().parse_args(["sweep"])).workload.endpoint == "completions"
    # left out of the recorded config at its default (a run reads as before there was a choice),
    # kept otherwise
    assert "endpoint" not in WorkloadConfig().model_dump()
    assert WorkloadConfig(endpoint="chat").model_dump()["endpoint"] == "chat"


def test_the_flag_sets_the_lane_and_offers_only_the_schemas_values():
    key = BY_FIELD["workload.endpoint"]
    assert (key.toml, key.flag) == ("endpoint", "--endpoint")
    lane = lane_config(build_parser().parse_args(["sweep", "--endpoint", "chat"]))
    assert lane.workload.endpoint == "chat"
    with pytest.raises(UserError, match=r"--endpoint: invalid choice: 'responses' .*'completions', 'chat'"):
        build_parser().parse_args(["sweep", "--endpoint", "responses"])


def test_the_lane_file_key(tmp_path):
    path = tmp_path / "lanes.toml"
    path.write_text('[[lanes]]\nname = "a"\nendpoint = "chat"\n\n[[lanes]]\nname = "b"\n')
    a, b = load_lane_file(path).lanes
    assert (a.workload.endpoint, b.workload.endpoint) == ("chat", "completions")
    path.write_text('[[lanes]]\nname = "a"\nendpoint = "responses"\n')
    with pytest.raises(UserError, match=r"lanes\.toml:3: .*endpoint"):
        load_lane_file(path)


def test_chat_leaves_context_for_the_template():
    plain = LaneConfig(levels=[2], workload=WorkloadConfig(prompt_tokens=220, output_tokens=16))
    chat = LaneConfig(levels=[2],
                      workload=WorkloadConfig(prompt_tokens=220, output_tokens=16, endpoint="chat"))
    assert plain.ctx_wanted() == 2 * 256 and chat.ctx_wanted() == 2 * 512
