"""With --with-fairness, an adaptive lane whose server satbench starts runs its fairness checks first,
and what they forbid caps its climb: here the server falls over with 4 requests in flight in F1, so
the sweep climbs to N=3 and no higher, on a fresh server, and says why in its plan."""

from __future__ import annotations

import json

import pytest

from satbench.cli.main import main
from satbench.config.schema import LaneConfig
from satbench.run.sweep import checks_first
from tests.faults.common import FAKE_BIN


@pytest.fixture(autouse=True)
def _no_source_check(monkeypatch):
    monkeypatch.setattr("satbench.run.sweep.satbench_source", lambda: (None, []))


def test_a_server_failure_in_the_checks_caps_the_climb_that_follows(tmp_path, monkeypatch, capsys):
    from satbench.gguf.synthetic import write_synthetic_gguf

    model = tmp_path / "tiny.gguf"
    write_synthetic_gguf(model, "llama", "tiny", 1)
    monkeypatch.setenv("FAKE_BIN_SCRIPT", json.dumps({"die_at_busy_slots": 4, "decode_iteration_ms": 2.0}))
    run = tmp_path / "run"
    code = main(["sweep", "--server-bin", FAKE_BIN, "--model", str(model), "--parallel", "4",
                 "--prompt-tokens", "64", "--output-tokens", "8", "--with-fairness", "-o", str(run)])
    err = capsys.readouterr().err
    assert code == 4 and "fairness F1 (4 in flight) failed" in err.strip().splitlines()[-1], err[-2000:]
    manifest = json.loads((run / "run.json").read_text())
    failure, = manifest["server_failures"]  # the fresh solo server never had 4 in flight
    assert (failure["scenario"], failure["level"]) == ("fairness", 4)
    plan = manifest["plan"]["default"]
    assert "ceiling N=3" in plan[0]["reason"], plan[0]
    measured = sorted({d["level"] for d in plan if d["level"] is not None})
    assert measured == [1, 2, 3], plan
    lane = manifest["provenance"]["lanes"]["default"]
    assert lane["runtime"]["pid"] != lane["fairness_runtime"]["pid"]  # the solo server's, not the checks'
    assert lane["runtime"]["memory"] is not None  # read from the solo server's own start
    rec = json.loads((run / "recommendations.json").read_text())["lanes"][0]
    assert rec["recommended_concurrency"] <= 3 and rec["server_failure_cap"] == 3


@pytest.mark.parametrize(("lane", "first"), [
    ({"adaptive": {}}, True),
    ({"adaptive": {}, "runtime": {"kind": "native", "server_bin": "/bin/llama-server"}}, True),
    ({}, False),  # fixed levels: nothing to cap
    ({"adaptive": {}, "runtime": {"kind": "url", "model": None, "url": "http://127.0.0.1:1"}},
     False),  # a running server is not restarted
])
def test_which_lanes_run_their_checks_first(lane, first):
    assert checks_first(LaneConfig.model_validate(lane)) is first


def test_checks_before_the_sweep_stop_at_the_first_that_fails(tmp_path, monkeypatch, capsys):
    """A slot served at half its neighbours' rate fails F1 (4 in flight): every check left puts 4 or
    more in flight, so it could forbid only what F1 forbids; they are not run, and say so."""
    from satbench.gguf.synthetic import write_synthetic_gguf

    model = tmp_path / "tiny.gguf"
    write_synthetic_gguf(model, "llama", "tiny", 1)
    monkeypatch.setenv("FAKE_BIN_SCRIPT", json.dumps({"slow_slots": [1], "slow_slot_rate": 0.5,
                                                      "decode_iteration_ms": 2.0}))
    run = tmp_path / "run"
    code = main(["sweep", "--server-bin", FAKE_BIN, "--model", str(model), "--parallel", "4",
                 "--prompt-tokens", "64", "--output-tokens", "8", "--with-fairness", "-o", str(run)])
    err = capsys.readouterr().err
    assert code == 6, err[-2000:]
    lane = json.loads((run / "verdicts.json").read_text())["lanes"][0]
    verdicts = {v["check"]: v for v in lane["verdicts"]}
    assert verdicts["F1"]["verdict"] == "fail" and verdicts["F1"]["concurrency"] == 4
    # S3 puts 2 in flight, so it runs before F1 (a busy host may leave its verdict inconclusive)
    assert not (verdicts["S3"]["reason"] or "").startswith("not run"), verdicts["S3"]
    for check in ("F2", "F3", "S1", "S2"):
        v = verdicts[check]
        assert v["verdict"] == "inconclusive" and v["reason"].startswith("not run: F1 (equal requests) "
                                                                         "failed at 4 in flight"), v
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    ran = {e.get("check") for e in events if e.get("scenario") == "fairness"}
    assert "S3" in ran and not ran & {"F2", "F3", "S1", "S2"}
    plan = json.loads((run / "run.json").read_text())["plan"]["default"]
    assert "ceiling N=3: F1 (equal requests) failed at 4 in flight" in plan[0]["reason"], plan[0]
    rec = json.loads((run / "recommendations.json").read_text())["lanes"][0]
    assert rec["fairness_cap"] == 3 and rec["fairness_unverified"] == []
