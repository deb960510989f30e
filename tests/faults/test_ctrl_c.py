"""Ctrl-C (SIGINT) mid-level, also while requests hang: satbench exits 130 at once with one line, the
run directory is valid, analyzable and marked interrupted, and every request completed before the
signal is kept."""

from __future__ import annotations

import signal
import subprocess
import time

from satbench.records.events import LevelMark, read_events
from tests.faults.common import (
    analyzable,
    cli_subprocess,
    kept_vs_completed,
    one_error_line,
    requests,
    served_ok,
    small_sweep,
    status_of,
    table_row,
)


def _interrupt_when(run_dir, argv, ready, settle_s: float = 0.0, sig: int = signal.SIGINT,
                    sigint_ignored: bool = False) -> tuple[int, str, int]:
    """Start the sweep, SIGINT it once `ready(events text)`; (exit code, stderr, signal time). It must
    exit within 30 s of the signal (far less than the rest of the sweep or a hung request's timeout)."""
    ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored else None
    proc = subprocess.Popen(cli_subprocess(argv), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, preexec_fn=ignore)
    events = run_dir / "events.jsonl"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (events.exists() and ready(events.read_text())):
        time.sleep(0.01)
    time.sleep(settle_s)
    sent_ns = time.perf_counter_ns()  # CLOCK_MONOTONIC, the fake's clock too
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    return proc.returncode, err, sent_ns


def _checks(run_dir, code, err):
    """Interrupted, not finished: the last level ended `interrupted` and the run says so."""
    line = one_error_line(err)
    assert code == 130, code
    assert line == f"satbench: error: interrupted; what was measured is in {run_dir} (status: interrupted)"
    assert status_of(run_dir) == "interrupted"
    ends = [m for m in read_events(run_dir) if isinstance(m, LevelMark) and m.kind == "level_end"]
    assert ends and ends[-1].status == "interrupted"
    results = analyzable(run_dir)
    assert results["status"] == "interrupted"
    return line, results


def test_ctrl_c_mid_level(fake_server, tmp_path):
    fake = fake_server(n_slots=2, decode_iteration_ms=5.0)
    run_dir = tmp_path / "run"
    code, err, sent_ns = _interrupt_when(run_dir, small_sweep(fake.base_url, run_dir, requests=400, output=8),
                                         lambda text: text.count('"phase":"measured"') >= 6)
    line, results = _checks(run_dir, code, err)
    schedule = fake.stop()
    kept, completed = kept_vs_completed(run_dir, schedule,
                                        before_ns=sent_ns - 20_000_000)  # 20 ms: in transit
    assert completed >= 6 and results["lanes"][0]["levels"][0]["counts"]["requests_ok"] >= 6
    # what the fake finished in the moment between the signal and satbench stopping was in flight: not kept
    after = len(served_ok(schedule)) - len(served_ok(schedule, before_ns=sent_ns))
    assert after <= 2
    # the requests cut by Ctrl-C are recorded (with what they got), as `cancelled`, never as server errors
    cut = [e for e in requests(run_dir) if not e.ok]
    assert len(cut) <= 2 and all(e.error.type == "cancelled" for e in cut)
    flags = results["lanes"][0]["levels"][0]["flags"]
    assert not any(f.startswith("errors:") for f in flags)
    table_row("Ctrl-C mid-level", "SIGINT to the satbench process", code, line, "interrupted", kept,
              f"{len(served_ok(schedule, before_ns=sent_ns))} ({completed} of them >20 ms before the signal; "
              f"+{after} finished by the server after it, recorded as cancelled)")


def test_ctrl_c_while_requests_hang(fake_server, tmp_path):
    fake = fake_server(n_slots=2, decode_iteration_ms=5.0, hang_from_completion=5)
    run_dir = tmp_path / "run"
    argv = small_sweep(fake.base_url, run_dir, requests=20, output=8)  # default request timeout: 300 s
    code, err, sent_ns = _interrupt_when(run_dir, argv, lambda text: text.count('"phase":"measured"') >= 2,
                                         settle_s=0.5)  # two requests hang meanwhile
    line, _ = _checks(run_dir, code, err)
    schedule = fake.stop()
    kept, completed = kept_vs_completed(run_dir, schedule, before_ns=sent_ns)
    assert kept == completed == 4
    assert sum(r["status"] == "hung" for r in schedule) == 2  # given up by satbench, not by a timeout
    table_row("Ctrl-C while requests hang", "hang_from_completion=5, then SIGINT", code, line, "interrupted",
              kept, completed)


def test_sigterm_is_an_interruption_too(fake_server, tmp_path):
    """`timeout`, systemd and `kill` send SIGTERM: the run must end as cleanly as with Ctrl-C (marked
    interrupted, analyzable, resumable), not die with run.json still saying 'running'."""
    fake = fake_server(n_slots=2, decode_iteration_ms=5.0)
    run_dir = tmp_path / "run"
    code, err, _ = _interrupt_when(run_dir, small_sweep(fake.base_url, run_dir, requests=400, output=8),
                                   lambda text: text.count('"phase":"measured"') >= 6, sig=signal.SIGTERM)
    _checks(run_dir, code, err)


def test_sigterm_stops_a_sweep_started_in_the_background_of_a_script(fake_server, tmp_path):
    """`satbench sweep … &` in a script starts with SIGINT ignored; SIGTERM (which takes Ctrl-C's
    path) must still stop it cleanly instead of being ignored with the run left 'running'."""
    fake = fake_server(n_slots=2, decode_iteration_ms=5.0)
    run_dir = tmp_path / "run"
    code, err, _ = _interrupt_when(run_dir, small_sweep(fake.base_url, run_dir, requests=400, output=8),
                                   lambda text: text.count('"phase":"measured"') >= 6, sig=signal.SIGTERM,
                                   sigint_ignored=True)
    _checks(run_dir, code, err)
