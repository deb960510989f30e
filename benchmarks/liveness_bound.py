"""How long satbench takes to declare a server failed that stops making progress with its sockets open.

For each case and N: a fake llama.cpp server (tests/fakes/fake_llama_server.py, its own process) is
swept by `satbench sweep --url` at concurrency N with the default bounds; once a few measured
requests are on disk the server is turned bad. Cases:

- sigstop: SIGSTOPped (nothing answers: /health, /slots and the streams fall silent). The liveness
  bound is 30 s at any N (docs/faults.md); before the watchdog it took four 60 s read timeouts.
- keepalive: each new request gets its stream head, then only an SSE comment (`: keepalive`) every
  second, while /health and /slots keep answering with idle slots (SIGUSR1, FakeScript.stall).
- drip: the same with one byte every 16 s instead.
- nohead: the same, but a new request gets not even its response head (each ends at the 60 s read
  timeout, which is no progress); before 2026-12-04 each timeout counted as progress, so only
  N + 3 of them in a row failed the level (180-240 s).
  Both are bounded by the progress bound (PROGRESS_TIMEOUT_S, 60 s: no token and no /slots work); before
  it, only by --request-timeout × (N + 3), 15-20 minutes at the default.

Printed per case and N: seconds from the change to the sweep's exit, its exit code, and the reason
run.json records.

    .venv/bin/python benchmarks/liveness_bound.py [--levels 1,8] [--cases sigstop,keepalive,drip,nohead]
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


# case → seconds between the stalled stream's writes
STALLS = {"keepalive": 1.0, "drip": 16.0, "nohead": 1.0}


def _start_fake(tmp: Path, case: str) -> tuple[subprocess.Popen, str]:
    script: dict = {"n_slots": 16, "decode_iteration_ms": 5.0}
    if case in STALLS:
        script.update(stall=case, stall_every_s=STALLS[case])
    (tmp / "script.json").write_text(json.dumps(script))
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


def one(case: str, n: int) -> tuple[float, int, str]:
    """(seconds from the change to the sweep's exit, its exit code, the recorded failure reason)."""
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        fake, url = _start_fake(tmp, case)
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
            os.kill(fake.pid, signal.SIGSTOP if case == "sigstop" else signal.SIGUSR1)
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
    ap.add_argument("--cases", default="sigstop,keepalive,drip,nohead")
    args = ap.parse_args()
    print(f"{'case':>9} {'N':>3} {'s to fail':>9} {'exit':>4}  reason")
    for case in args.cases.split(","):
        for n in (int(x) for x in args.levels.split(",")):
            took, code, reason = one(case, n)
            print(f"{case:>9} {n:>3} {took:>9.1f} {code:>4}  {reason}")


if __name__ == "__main__":
    main()
