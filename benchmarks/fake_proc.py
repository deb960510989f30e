"""The fake llama.cpp server in its own process, and a CPU hog beside it, for the benchmarks.

    proc, url = start_fake({"n_slots": 4, "lifo_share": 0.5, "lifo_seed": 3}, tmp)  # any FakeScript field
    ...
    stop_fake(proc)
    with cpu_hog(1):  # one busy-loop process per core taken
        ...

The script is validated by the fake itself (tests/fakes/fake_script.py, extra fields forbidden):
a bad field stops `start_fake` with the fake's own error.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FAKE = ROOT / "tests" / "fakes" / "fake_llama_server.py"


def start_fake(script: dict, tmp: Path, name: str = "fake",
               timeout_s: float = 20.0) -> tuple[subprocess.Popen, str]:
    """Start the fake with `script` (FakeScript fields) written to tmp/<name>.json; its stderr goes to
    tmp/<name>.stderr. Returns the process and its base URL (http://127.0.0.1:PORT)."""
    path, ready, err = tmp / f"{name}.json", tmp / f"{name}.ready.json", tmp / f"{name}.stderr"
    path.write_text(json.dumps(script))
    ready.unlink(missing_ok=True)
    with err.open("wb") as stderr:
        proc = subprocess.Popen([sys.executable, str(FAKE), "--port", "0", "--script", str(path),
                                 "--ready-file", str(ready)], stderr=stderr)
    deadline = time.monotonic() + timeout_s
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"the fake server {name} did not start: {err.read_text()[-2000:]}")
        time.sleep(0.02)
    return proc, json.loads(ready.read_text())["base_url"]


def stop_fake(proc: subprocess.Popen) -> None:
    """SIGTERM, as a clean shutdown (the fake prints its engine stats to its stderr file)."""
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)


@contextlib.contextmanager
def cpu_hog(processes: int = 1) -> Iterator[list[subprocess.Popen]]:
    """`processes` busy-loop Python processes for the duration of the block (each takes a whole core
    whenever the OS lets it), killed when the block ends."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)]
    try:
        yield hogs
    finally:
        for p in hogs:
            p.kill()
            p.wait()
