"""A server that dies mid-level: clear one-line error, non-zero exit, completed requests kept."""

from __future__ import annotations

import json
import threading
import time

from satbench.cli.main import main
from satbench.records.events import RequestEvent, read_events
from satbench.records.manifest import read_manifest


def test_server_killed_mid_level(fake_server, tmp_path, capsys):
    fake = fake_server(n_slots=2, decode_iteration_ms=5.0)
    run_dir = tmp_path / "run"

    def kill_later():
        deadline = time.monotonic() + 30
        events = run_dir / "events.jsonl"
        while time.monotonic() < deadline:  # wait until some measured requests are on disk
            if events.exists() and events.read_text().count('"phase":"measured"') >= 5:
                break
            time.sleep(0.01)
        fake.kill()

    killer = threading.Thread(target=kill_later)
    killer.start()
    code = main(["sweep", "--url", fake.base_url, "--concurrency", "2", "--requests-per-level", "400",
                 "--repetitions", "1", "--prompt-tokens", "16", "--output-tokens", "16", "-o", str(run_dir)])
    killer.join()
    err = capsys.readouterr().err.strip()
    assert code == 4
    last = err.splitlines()[-1]  # lines above it are the progress bar's
    assert last.startswith("satbench: error: lane default: level 2 (repetition 1) failed")
    assert f"(run directory: {run_dir})" in last
    assert "could not reach the server" in last and "Traceback" not in err
    m = read_manifest(run_dir)
    assert m.status == "failed"
    events = [e for e in read_events(run_dir) if isinstance(e, RequestEvent)]
    ok = [e for e in events if e.ok and e.phase == "measured"]
    assert len(ok) >= 5  # everything completed before the kill is on disk
    assert any(e.error is not None for e in events)
    results = json.loads((run_dir / "results.json").read_text())
    assert results["status"] == "failed"
    assert any("repetition_failed" in f for f in results["lanes"][0]["levels"][0]["flags"])


def test_ctrl_c_leaves_a_valid_interrupted_run(fake_server, tmp_path):
    import signal
    import subprocess
    import sys

    fake = fake_server(n_slots=2, decode_iteration_ms=5.0)
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "satbench.cli.main", "sweep", "--url", fake.base_url,
                             "--concurrency", "2", "--requests-per-level", "400", "--repetitions", "1",
                             "--prompt-tokens", "16", "--output-tokens", "16", "-o", str(run_dir)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    events = run_dir / "events.jsonl"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if events.exists() and events.read_text().count('"phase":"measured"') >= 5:
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert err.decode().strip().splitlines()[-1].startswith("satbench: error: interrupted")
    assert read_manifest(run_dir).status == "interrupted"
    assert main(["analyze", str(run_dir)]) == 0  # still analyzable
    results = json.loads((run_dir / "results.json").read_text())
    assert results["status"] == "interrupted"
    assert results["lanes"][0]["levels"][0]["counts"]["requests_ok"] >= 5
