"""A sweep in its own process, stopped by Ctrl-C once it has finished some units (resume tests)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from satbench.records.manifest import read_manifest


def sweep_interrupted(url: str, flags: list[str], run_dir: Path, after_units: int = 1,
                      into_next_s: float = 0.4) -> None:
    """Run `satbench sweep --url URL FLAGS -o RUN_DIR`, send SIGINT `into_next_s` after its
    `after_units`-th unit finished, and check it exited 130."""
    proc = subprocess.Popen([sys.executable, "-m", "satbench.cli.main", "sweep", "--url", url, *flags,
                             "-o", str(run_dir)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if len(read_manifest(run_dir).completed_units) >= after_units:
                break
        except Exception:  # not written yet
            pass
        time.sleep(0.02)
    time.sleep(into_next_s)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err.decode()[-2000:]
