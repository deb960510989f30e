"""Every status satbench prints is the one run.json holds. An interrupt while the measured run is being
derived (results, recommendations, report) leaves run.json `complete`, says so and names the command
that finishes the bundle; that command does. A resume that skips levels because a server failed in
an earlier session says so, one line per lane."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from satbench.cli.main import main
from satbench.pipeline import new_sweep as Sweep
from satbench.pipeline import verify
from satbench.records.layout import SUMS_FILE
from satbench.records.manifest import read_manifest
from tests.conftest import url_lane_config
from tests.faults.common import one_error_line, small_sweep, status_of, table_row


def _finished_by(run_dir, command: list[str]) -> None:
    """`command` completes the bundle: results, report and a SHA256SUMS that verifies."""
    assert main(command) in (0, 4)
    assert (run_dir / "results.json").exists() and (run_dir / "EVIDENCE.md").exists()
    assert (run_dir / SUMS_FILE).exists() and verify(run_dir).ok
    assert status_of(run_dir) == "complete"


def _report_line(run_dir) -> str:
    return (f"satbench: error: interrupted while writing the results and report; the measurements are "
            f"complete (status: complete): run `satbench report {run_dir}`")


def test_ctrl_c_while_the_sweep_analyzes_leaves_complete_and_names_report(fake_server, tmp_path, capsys,
                                                                         monkeypatch):
    """A real SIGINT, in the sweep's own analysis after its last level (the run is measured)."""
    import satbench.pipeline as pipeline

    fake = fake_server(n_slots=2, decode_iteration_ms=2.0)
    run_dir = tmp_path / "run"
    real = pipeline.analyze_and_write

    def interrupted(path):
        signal.raise_signal(signal.SIGINT)  # Ctrl-C lands here, as it would while analyzing
        return real(path)
    monkeypatch.setattr(pipeline, "analyze_and_write", interrupted)
    code = main(small_sweep(fake.base_url, run_dir, requests=4))
    line = one_error_line(capsys.readouterr().err)
    assert code == 130
    assert line == _report_line(run_dir)
    assert status_of(run_dir) == "complete"  # what the line says
    assert not (run_dir / "results.json").exists() and not (run_dir / SUMS_FILE).exists()  # nothing stale
    monkeypatch.undo()
    _finished_by(run_dir, ["report", str(run_dir)])
    table_row("Ctrl-C while analyzing", "SIGINT in the sweep's analyze", code, line, "complete", "-", "-")


def test_sigterm_while_the_report_is_written_then_resume_writes_it(fake_server, tmp_path, capsys,
                                                                   monkeypatch):
    """SIGTERM (kill, timeout) in the CLI's report step: the same state and line; `sweep --resume`
    of the complete run whose report is missing measures nothing and writes it."""
    import satbench.pipeline as pipeline

    fake = fake_server(n_slots=2, decode_iteration_ms=2.0)
    run_dir = tmp_path / "run"
    real = pipeline.report

    def terminated(path, found=None):
        signal.raise_signal(signal.SIGTERM)
        return real(path, found)
    monkeypatch.setattr(pipeline, "report", terminated)
    code = main(small_sweep(fake.base_url, run_dir, requests=4))
    line = one_error_line(capsys.readouterr().err)
    assert code == 130 and line == _report_line(run_dir)
    assert status_of(run_dir) == "complete" and not (run_dir / SUMS_FILE).exists()
    measured = (run_dir / "events.jsonl").read_text()
    monkeypatch.undo()
    _finished_by(run_dir, ["sweep", "--resume", str(run_dir)])
    err = capsys.readouterr().err
    assert "the run is complete but its report is missing: writing it (nothing is measured again)" in err
    assert (run_dir / "events.jsonl").read_text() == measured  # nothing was measured again
    assert not read_manifest(run_dir).resumes  # and no session was begun
    # once the report is there, a complete run has nothing to resume
    assert main(["sweep", "--resume", str(run_dir)]) == 2
    assert "the run is complete; nothing to resume" in capsys.readouterr().err
    table_row("SIGTERM while reporting", "SIGTERM in write_report, then --resume", code, line, "complete",
              "-", "-")


def test_an_interrupt_mid_level_still_says_interrupted(fake_server, tmp_path, capsys, monkeypatch):
    """The words follow run.json: a run stopped while measuring is `interrupted`, and says that."""
    import satbench.load.loadgen as loadgen

    fake = fake_server(n_slots=2, decode_iteration_ms=2.0)
    run_dir = tmp_path / "run"
    real = loadgen.to_event
    count = {"n": 0}

    def counting(*args, **kwargs):
        count["n"] += 1
        if count["n"] == 4:
            signal.raise_signal(signal.SIGINT)
        return real(*args, **kwargs)
    monkeypatch.setattr(loadgen, "to_event", counting)
    code = main(small_sweep(fake.base_url, run_dir, requests=200))
    line = one_error_line(capsys.readouterr().err)
    assert code == 130 and status_of(run_dir) == "interrupted"
    assert line == f"satbench: error: interrupted; what was measured is in {run_dir} (status: interrupted)"


def _when(predicate, timeout_s: float = 60) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def test_a_resume_says_which_levels_a_failure_keeps_from_running(fake_server, tmp_path, capsys):
    """Session 0: level 2 loses its server (SIGSTOP, failed by the liveness watchdog), the restarted
    server runs on and Ctrl-C stops it. The resume names what it does not run again, and why."""
    fake = fake_server(n_slots=2, decode_iteration_ms=2.0)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    cfg = url_lane_config(fake.base_url, [1, 2, 4], requests=200, reps=2, prompt=16, output=4)
    sweep = Sweep(cfg, run_dir, ["satbench", "test"], liveness_timeout_s=1.0)
    events, manifest = run_dir / "events.jsonl", run_dir / "run.json"
    done: dict = {}

    def faults():
        if not _when(lambda: events.exists() and '"level":2,"repetition":1,"stream"' in events.read_text()):
            return
        os.kill(fake.proc.pid, signal.SIGSTOP)
        if _when(lambda: '"server_failures":[{' in manifest.read_text().replace(" ", "").replace("\n", "")):
            os.kill(fake.proc.pid, signal.SIGCONT)
        if _when(lambda: '"restarted":true' in manifest.read_text().replace(" ", "")):
            done["interrupted"] = True
            os.kill(os.getpid(), signal.SIGINT)
    thread = threading.Thread(target=faults, daemon=True)
    thread.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            sweep.run()
    finally:
        thread.join(10)
        os.kill(fake.proc.pid, signal.SIGCONT)
    assert done.get("interrupted"), "the faults did not happen in order: the test proves nothing"
    before = read_manifest(run_dir)
    assert before.status == "interrupted" and before.server_failures[0].level == 2
    assert "solo/default/1/2" not in before.completed_units  # something is left to resume
    capsys.readouterr()

    code = main(["sweep", "--resume", str(run_dir)])
    err = capsys.readouterr().err
    why = "the server stopped answering: nothing arrived on any of 2 streams and /slots was silent for 1 s"
    skip = (f"satbench: lane default: levels 2 and above are not run again: level 2 failed in session 0 "
            f"({why})")
    assert skip in err.splitlines(), err[-2000:]
    assert code == 4  # the failure stands, named as the earlier session's
    assert f"satbench: in session 0: lane default: level 2 (repetition 1) failed: {why}" in err
    after = read_manifest(run_dir)
    assert after.status == "complete"
    assert "solo/default/1/2" in after.completed_units
    assert not any(u.startswith(("solo/default/2/", "solo/default/4/")) for u in after.completed_units)
    table_row("resume after a failed level", "SIGSTOP at level 2, Ctrl-C, --resume", code, skip, "complete",
              "-", "-")
