"""How long satbench takes to declare a server failed that stops answering with its sockets open.

For each N: a fake llama.cpp server (tests/fakes/fake_llama_server.py, its own process) is swept by
`satbench sweep --url` at concurrency N with the default liveness bound; once a few measured
requests are on disk the server is SIGSTOPped. Printed per N: seconds from SIGSTOP to the sweep's
exit, its exit code, and the reason run.json records. The bound to meet is 30 s at any N
(docs/faults.md); before the watchdog it took four 60 s read timeouts.

    .venv/bin/python benchmarks/liveness_bound.py [--levels 1,8]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FAKE = ROOT / "tests" / "fakes" / "fake_llama_server.py"


def _start_fake(tmp: Path) -> tuple[subprocess.Popen, str]:
    (tmp / "script.json").write_text(json.dumps({"n_slots": 16, "decode_iteration_ms": 5.0}))
    ready = tmp / "ready.json"
    proc = subprocess.Popen([sys.executable, str(FAKE), "--port", "0", "--script", str(tmp / "script.json"),
                             "--ready-file", str(ready)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the fake server did not start")
        time.sleep(0.02)
    return proc, json.loads(ready.read_text())["base_url"]


def one(n: int) -> tuple[float, int, str]:
    """(seconds from SIGSTOP to the sweep's exit, its exit code, the recorded failure reason)."""
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        fake, url = _start_fake(tmp)
        run = tmp / "run"
        sweep = subprocess.Popen([str(ROOT / ".venv" / "bin" / "satbench"), "sweep", "--url", url,
                                  "--concurrency", str(n), "--requests-per-level", "2000",
                                  "--repetitions", "1",
                                  "--prompt-tokens", "32", "--output-tokens", "16", "-o", str(run)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            events = run / "events.jsonl"
            while not (events.exists() and events.read_text().count('"phase":"measured"') >= 3):
                if sweep.poll() is not None:
                    raise SystemExit(f"the sweep ended before the server was stopped "
                                     f"(exit {sweep.returncode})")
                time.sleep(0.01)
            os.kill(fake.pid, signal.SIGSTOP)
            stopped = time.monotonic()
            code = sweep.wait(timeout=600)
            took = time.monotonic() - stopped
        finally:
            os.kill(fake.pid, signal.SIGCONT)
            fake.terminate()
            fake.wait(timeout=20)
            if sweep.poll() is None:
                sweep.kill()
        failures = json.loads((run / "run.json").read_text())["server_failures"]
        return took, code, failures[0]["reason"] if failures else "(none recorded)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", default="1,8")
    args = ap.parse_args()
    print(f"{'N':>3} {'s to fail':>9} {'exit':>4}  reason")
    for n in (int(x) for x in args.levels.split(",")):
        took, code, reason = one(n)
        print(f"{n:>3} {took:>9.1f} {code:>4}  {reason}")


if __name__ == "__main__":
    main()
