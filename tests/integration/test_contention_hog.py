"""The contention guard end to end: a CPU hog beside a fake server (its own process, found by its
listening port) makes the adaptive sweep measure levels again, and the capability report refuses a
recommendation resting on contended levels unless --accept-contended."""

from __future__ import annotations

import json
import subprocess
import sys

from satbench.cli.main import main


def test_a_cpu_hog_beside_the_server_is_contention(tmp_path, fake_server, contention_guard):
    fake = fake_server(n_slots=2, decode_iteration_ms=4.0)
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    out = tmp_path / "run"
    try:
        code = main(["sweep", "--url", fake.base_url, "--prompt-tokens", "16", "--output-tokens", "8",
                     "-o", str(out)])
    finally:
        hog.kill()
        hog.wait(timeout=20)
    assert code == 0
    run = json.loads((out / "run.json").read_text())
    actions = [d["action"] for d in run["plan"]["default"]]
    assert "remeasure" in actions and actions[-1] == "stop"
    results = json.loads((out / "results.json").read_text())
    levels = results["lanes"][0]["levels"]
    assert all(lv["memory"]["server_cpu_cores"] is not None for lv in levels)  # the fake's pid, by its port
    assert any(lv["contended"] or lv["excluded_repetitions"] for lv in levels)
    rec = json.loads((out / "recommendations.json").read_text())["lanes"][0]
    if rec["contended"] and rec["recommended_concurrency"] is not None:
        cap = tmp_path / "cap.json"
        assert main(["capability", "--recommendations", str(out / "recommendations.json"), "--url",
                     fake.base_url, "-o", str(cap)]) == 0
        lane = json.loads(cap.read_text())["lanes"][0]
        assert lane["status"] == "unmeasured" and "--accept-contended" in lane["reason"]
        assert main(["capability", "--recommendations", str(out / "recommendations.json"), "--url",
                     fake.base_url, "--accept-contended", "-o", str(cap)]) == 0
        assert json.loads(cap.read_text())["lanes"][0]["status"] == "measured"
    else:  # every level contended: no knee can be named, and nothing is advertised as measured
        assert rec["recommended_concurrency"] is None or not rec["contended"]
