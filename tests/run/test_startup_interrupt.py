"""Ctrl-C or SIGTERM while a server is still starting (a slow model load) stops the run at once:
exit 130, run.json `interrupted`, and the half-started server is stopped, not left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from satbench.gguf.synthetic import write_synthetic_gguf
from satbench.records.manifest import read_manifest


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_server_startup_interrupts_the_run(tmp_path, sig):
    model = tmp_path / "m.gguf"
    write_synthetic_gguf(model, "llama", "tiny", 1)
    pid_file = tmp_path / "server.pid"
    never_ready = tmp_path / "never-ready-server"  # a llama-server that never answers /health
    never_ready.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 1000\n")
    never_ready.chmod(0o755)
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "satbench.cli.main", "sweep", "--server-bin",
                             str(never_ready), "--model", str(model), "-o", str(run_dir)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    server_pid = None
    try:
        deadline = time.monotonic() + 30
        while not (pid_file.exists() and pid_file.read_text().strip()):
            assert proc.poll() is None and time.monotonic() < deadline, "the stand-in server never started"
            time.sleep(0.02)
        server_pid = int(pid_file.read_text())
        time.sleep(1.0)  # satbench is now polling the server's /health
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)  # before the fix: deaf until the 180 s startup timeout
        deadline = time.monotonic() + 10  # stopped (and reaped) by satbench before it exited
        while not _gone(server_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        server_gone = _gone(server_pid)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if server_pid is not None and not _gone(server_pid):
            os.kill(server_pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == (
        f"satbench: error: interrupted; what was measured is in {run_dir} (status: interrupted)")
    manifest = read_manifest(run_dir)
    assert manifest.status == "interrupted"
    assert ("SIGTERM" if sig == signal.SIGTERM else "Ctrl-C") in manifest.status_reason  # says which it was
    assert server_gone, "the half-started server outlived the run"
