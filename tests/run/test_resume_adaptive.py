"""`--resume` of an adaptive sweep replays its recorded decisions (running the step an interrupt cut
short) and plans on from there, never deciding a recorded step anew."""

from __future__ import annotations

from satbench.cli.main import main
from satbench.records.manifest import read_manifest
from tests.run.interrupt import sweep_interrupted

FLAGS = ["--requests-per-level", "24", "--prompt-tokens", "16", "--output-tokens", "16"]


def test_an_interrupted_adaptive_sweep_resumes_its_recorded_plan(fake_server, tmp_path):
    fake = fake_server(n_slots=2, decode_iteration_ms=5.0)
    run_dir = tmp_path / "run"
    sweep_interrupted(fake.base_url, FLAGS, run_dir, after_units=2, into_next_s=0.3)
    before = read_manifest(run_dir)
    recorded = before.plan["default"]
    assert before.status == "interrupted" and recorded[-1].action != "stop"
    assert len(recorded) > len(before.completed_units)  # the step cut short was decided, not finished

    assert main(["sweep", "--resume", str(run_dir)]) == 0
    after = read_manifest(run_dir)
    plan = after.plan["default"]
    assert after.status == "complete" and plan[-1].action == "stop"
    assert plan[:len(recorded)] == recorded  # replayed as recorded, not decided anew
    assert {d.session for d in plan[len(recorded):]} == {1}
    steps = [f"solo/default/{d.level}/{d.repetition}" for d in plan if d.action != "stop"]
    assert after.completed_units == steps  # every step ran once, in the planned order
