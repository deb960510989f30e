"""A new adaptive sweep takes issue 35's shortcuts, and says so in run.json: one warmup per stream
before the first level only, a level measured once given its batch-means CI; a run.json written
before them reads as it was measured."""

from __future__ import annotations

import json

from satbench.cli.main import main
from satbench.config.schema import AdaptiveConfig
from satbench.records.manifest import read_manifest

FLAGS = ["--prompt-tokens", "16", "--output-tokens", "8"]


def test_a_new_adaptive_sweep_warms_up_before_its_first_level_only(fake_server, tmp_path):
    fake = fake_server(n_slots=2, decode_iteration_ms=5.0)
    run_dir = tmp_path / "run"
    assert main(["sweep", "--url", fake.base_url, *FLAGS, "-o", str(run_dir)]) == 0
    adaptive = read_manifest(run_dir).config.lanes[0].adaptive
    assert adaptive is not None
    assert (adaptive.one_repetition_ci, adaptive.warmup) == ("batch_means", "first_level")
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    requests = [e for e in events if e["kind"] == "request"]
    assert {e["level"] for e in requests} >= {1, 2, 4}  # climbed to the confirm past the 2 slots
    assert [(e["level"], e["repetition"]) for e in requests if e["phase"] == "warmup"] == [(1, 1)]
    plan = read_manifest(run_dir).plan["default"]
    confirm = next(d for d in plan if d.action == "confirm")
    assert confirm.level == 4 and confirm.requests == 8  # 2 per stream past the slots


def test_a_run_json_from_before_the_shortcuts_reads_as_it_was_measured():
    old = AdaptiveConfig.model_validate({"ci_target": 0.05, "min_repetitions": 2, "max_repetitions": 5,
                                         "requests_per_stream": 4, "contended_retries": 2, "budget_s": None})
    assert (old.one_repetition_ci, old.warmup) == ("none", "every_level")


def test_run_json_names_the_event_loop_the_load_generator_ran_on(fake_server, tmp_path):
    from satbench.load.eventloop import loop_factory

    fake = fake_server(n_slots=1, decode_iteration_ms=2.0)
    run_dir = tmp_path / "run"
    assert main(["sweep", "--url", fake.base_url, *FLAGS, "--concurrency", "1", "--repetitions", "1",
                 "--requests-per-level", "2", "-q", "-o", str(run_dir)]) == 0
    provenance = read_manifest(run_dir).provenance
    assert provenance is not None
    assert provenance.event_loop == ("asyncio" if loop_factory() is None else "uvloop")
    evidence = (run_dir / "EVIDENCE.md").read_text()
    assert f"load generator on the {provenance.event_loop} event loop" in evidence
