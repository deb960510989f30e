"""A whole sweep against the fake llama.cpp server with drawn lengths: every request asks for the
lengths its seed gives it, the server sees them, and run.json and results.json record how they were
drawn (enough to draw them again)."""

from __future__ import annotations

import json
import re

import pytest

from satbench.cli.lanekeys import build_lane
from satbench.config.schema import RunConfig
from satbench.pipeline import new_sweep as Sweep
from satbench.records.events import RequestEvent, read_events
from satbench.records.manifest import read_manifest
from satbench.workload.lengths import Lengths
from tests.conftest import FakeProcess

_ID = re.compile(r"-r(\d+)-([wmb])(\d+)$")
_PHASE = {"w": "warmup", "m": "measured", "b": "background"}


@pytest.fixture(scope="module")
def drawn_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lengths")
    fake = FakeProcess(tmp, dict(n_slots=2, prefill_ms_per_token=0.02, decode_iteration_ms=2.0))
    lane = build_lane({"runtime.kind": "url", "runtime.url": fake.base_url, "levels": [1, 2],
                       "requests_per_level": 12, "repetitions": 2, "workload.prompt_tokens": "uniform:32-96",
                       "workload.output_tokens": "normal:12,4", "workload.seed": 11})
    run_dir = tmp / "run"
    run_dir.mkdir()
    try:
        results = Sweep(RunConfig(lanes=[lane]), run_dir, ["satbench", "test"]).run()
    finally:
        served = fake.stop()
    events = [e for e in read_events(run_dir) if isinstance(e, RequestEvent)]
    return lane, results, run_dir, events, {rec["id"]: rec for rec in served}


def test_each_request_gets_the_lengths_its_seed_draws(drawn_run):
    lane, _, _, events, _ = drawn_run
    lengths = Lengths(lane.workload)
    assert len(events) == 2 * ((1 + 12) + (2 + 12))
    for e in events:
        m = _ID.search(e.request_id)
        assert m is not None and int(m[1]) == e.repetition
        assert (e.prompt_tokens, e.max_tokens) == lengths.of(_PHASE[m[2]], int(m[1]), int(m[3]))
    assert all(32 <= e.prompt_tokens <= 96 and 2 <= e.max_tokens <= 24 for e in events)
    assert len({e.prompt_tokens for e in events}) > 10 and len({e.max_tokens for e in events}) > 5
    # level 1 and level 2 sent the same lengths for the same measured request of a repetition
    by_level = {n: {(e.repetition, e.request_id.rsplit("-", 1)[1]): (e.prompt_tokens, e.max_tokens)
                    for e in events if e.level == n and e.phase == "measured"} for n in (1, 2)}
    assert by_level[1] == by_level[2]


def test_the_server_saw_the_drawn_lengths_and_answered_them_in_full(drawn_run):
    _, _, _, events, served = drawn_run
    for e in events:
        rec = served[e.request_id]
        assert (rec["prompt_tokens"], rec["n_predict"]) == (e.prompt_tokens, e.max_tokens)
        assert e.ok and e.output_tokens == e.max_tokens


def test_run_json_and_results_json_record_the_distributions_and_seed(drawn_run):
    lane, results, run_dir, events, _ = drawn_run
    recorded = read_manifest(run_dir).config.lanes[0].workload
    assert recorded == lane.workload == results.config.lanes[0].workload
    doc = json.loads((run_dir / "results.json").read_text())["config"]["lanes"][0]["workload"]
    assert doc["seed"] == 11 and (doc["prompt_tokens"], doc["output_tokens"]) == (64, 12)
    assert doc["prompt_lengths"]["spec"] == "uniform:32-96" and doc["output_lengths"]["spec"] == "normal:12,4"
    assert (doc["output_lengths"]["min_tokens"], doc["output_lengths"]["max_tokens"]) == (2, 24)
    # what run.json records draws every request's lengths again (a resume or a rerun sends the same)
    again = Lengths(recorded)
    for e in events:
        m = _ID.search(e.request_id)
        assert m is not None
        assert (e.prompt_tokens, e.max_tokens) == again.of(_PHASE[m[2]], int(m[1]), int(m[3]))


def test_the_levels_figures_count_each_requests_own_tokens(drawn_run):
    _, results, _, events, _ = drawn_run
    levels = {lv.concurrency: lv for lv in results.lanes[0].levels}
    assert set(levels) == {1, 2}
    for n, lv in levels.items():
        assert all(r.status == "complete" and (r.output_tok_per_s or 0) > 0 for r in lv.repetitions)
        assert not [f for f in lv.flags if "per-slot context" in f]  # sized for the longest draw, 96 + 24
        measured = [e for e in events if e.level == n and e.phase == "measured"]
        assert sum(e.output_tokens for e in measured) == sum(e.max_tokens for e in measured)
