"""Each lane of recommendations.json names the workload its figures were measured with
(config/workload_profile.py): one profile per kind of traffic, read back as written, and an old file
that did not record it read as random. On the committed dense + V4 bundle's results, no server."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from pydantic import ValidationError

from satbench.analysis.results import read_results
from satbench.config.workload import ChatWorkload, LengthDistribution, TraceWorkload, WorkloadConfig
from satbench.config.workload_profile import NOT_RECORDED, WorkloadProfile, profile_of
from satbench.saturation.recommend import recommend_lane
from satbench.saturation.recommendations_file import (
    RECOMMENDATIONS_SCHEMA_VERSION,
    RecommendationsFile,
    recommendations_json_schema,
)

BUNDLE = Path(__file__).resolve().parents[2] / "evidence" / "cpu-2core-2026-12-01" / "run"
SHA = "ab" * 32
CHAT = WorkloadConfig(endpoint="chat", chat=ChatWorkload(turns=4, think_s=2.0), system_prompt_tokens=256,
                      prompt_tokens=48)
TRACE = WorkloadConfig(trace=TraceWorkload(path="t.jsonl", sha256=SHA, requests=10, duration_s=5.0,
                                           speed=2.0))


def test_a_profile_from_each_kind():
    random = profile_of(WorkloadConfig())
    assert (random.kind, random.text, random.prompt_lengths, random.output_lengths) == ("random", "random",
                                                                                        "64", "32")
    assert random.chat_turns is None and random.trace_sha256 is None
    assert profile_of(WorkloadConfig(shared_prefix=True)).kind == "shared-prefix"
    chat = profile_of(CHAT)
    assert (chat.kind, chat.text, chat.chat_turns, chat.chat_think_s, chat.system_prompt_tokens,
            chat.prompt_lengths) == ("chat", "chat:4,think=2,system=256", 4, 2.0, 256, "48")
    trace = profile_of(TRACE)
    assert (trace.kind, trace.text, trace.trace_sha256, trace.trace_speed) == ("trace",
                                                                              f"trace:{SHA[:12]},speed=2",
                                                                              SHA, 2.0)
    assert trace.prompt_lengths is None and trace.output_lengths is None  # the trace's lines give them
    drawn = WorkloadConfig(prompt_lengths=LengthDistribution(spec="uniform:16-48", kind="uniform",
                                                             min_tokens=16, max_tokens=48, mean_tokens=32))
    assert profile_of(drawn).prompt_lengths == "uniform:16-48"


def test_a_profile_holds_the_fields_of_its_kind_only():
    with pytest.raises(ValidationError, match="belong to a chat profile"):
        WorkloadProfile(kind="random", text="random", prompt_lengths="64", output_lengths="32", chat_turns=2)
    with pytest.raises(ValidationError, match="belong to a trace profile"):
        WorkloadProfile(kind="trace", text="trace:x", prompt_lengths=None, output_lengths=None)
    with pytest.raises(ValidationError):  # a record: frozen
        NOT_RECORDED.kind = "chat"  # type: ignore[misc]


def test_differs_names_the_first_difference_in_words():
    chat, random = profile_of(CHAT), profile_of(WorkloadConfig())
    assert chat.differs(chat) is None
    assert chat.differs(random) == "kind chat, not random"
    eight = profile_of(CHAT.model_copy(update={"chat": ChatWorkload(turns=8, think_s=2.0)}))
    assert chat.differs(eight) == "chat turns 4, not 8"
    assert TRACE.trace is not None
    other = profile_of(TRACE.model_copy(
        update={"trace": TRACE.trace.model_copy(update={"sha256": "cd" * 32})}))
    assert profile_of(TRACE).differs(other) == f"trace file sha256 {SHA[:12]}, not {'cd' * 6}"
    longer = profile_of(WorkloadConfig(prompt_tokens=512))
    assert random.differs(longer) is None  # lengths are described, compared only when asked
    assert random.differs(longer, lengths=True) == "prompt lengths 64, not 512"
    assert NOT_RECORDED.differs(longer, lengths=True) is None  # not recorded: nothing to compare


@pytest.fixture(scope="module")
def results():
    return read_results(BUNDLE)


def test_a_recommendation_names_its_workload_and_reads_back_as_written(results):
    lane = results.lanes[0].model_copy(update={"workload": CHAT})
    rec = recommend_lane(lane, results)
    assert rec is not None and rec.workload == profile_of(CHAT)
    recs = RecommendationsFile(created_at="2026-12-04T00:00:00+00:00", satbench_version="0",
                               satbench_commit=None, run_id="r", results_sha256="0" * 64, lanes=[rec])
    data = json.loads(recs.model_dump_json())
    assert data["schema_version"] == RECOMMENDATIONS_SCHEMA_VERSION == "1.15"
    assert data["lanes"][0]["workload"]["text"] == "chat:4,think=2,system=256"
    jsonschema.validate(data, recommendations_json_schema())
    back = RecommendationsFile.model_validate_json(recs.model_dump_json())
    assert back == recs and "workload" in back.lanes[0].model_fields_set


def test_a_file_that_did_not_record_it_reads_as_random_and_recommend_derives_it(results):
    """The committed bundle's recommendations as schema 1.14 wrote them (no workload): read as random,
    lengths unknown; `satbench recommend` on its results derives the profile from the lane's recorded
    workload."""
    data = json.loads((BUNDLE / "recommendations.json").read_text())
    data["schema_version"] = "1.14"
    for lane in data["lanes"]:
        del lane["workload"]
    jsonschema.validate(data, recommendations_json_schema())  # an old file still meets the schema
    old = RecommendationsFile.model_validate(data)
    for rec in old.lanes:
        assert rec.workload == NOT_RECORDED and rec.workload.kind == "random"
        assert rec.workload.prompt_lengths is None and "workload" not in rec.model_fields_set
    fresh = recommend_lane(results.lanes[0], results)
    assert fresh is not None and fresh.workload == profile_of(WorkloadConfig())
    assert fresh.workload.prompt_lengths == "64"
