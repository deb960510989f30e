"""An adaptive sweep whose server dies (and cannot be reached again) stops with that reason and
keeps what it measured."""

from __future__ import annotations

import json

from satbench.cli.main import main


def test_a_server_that_dies_at_4_in_flight_ends_the_adaptive_sweep(fake_server, tmp_path):
    fake = fake_server(n_slots=4, decode_iteration_ms=3.0, die_at_busy_slots=4)
    out = tmp_path / "run"
    code = main(["sweep", "--url", fake.base_url, "--prompt-tokens", "16", "--output-tokens", "8",
                 "-o", str(out)])
    assert code == 4  # a level lost its server (LevelFailedError): the run says so, with what it measured
    run = json.loads((out / "run.json").read_text())
    plan = run["plan"]["default"]
    assert plan[-1]["action"] == "stop" and "did not start again" in plan[-1]["reason"]
    assert {d["level"] for d in plan if d["level"]} <= {1, 2, 4}
    assert run["server_failures"] and run["server_failures"][0]["level"] == 4
    levels = json.loads((out / "results.json").read_text())["lanes"][0]["levels"]
    assert [lv["concurrency"] for lv in levels][:2] == [1, 2]
