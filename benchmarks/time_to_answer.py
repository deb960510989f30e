"""How long satbench takes to answer, adaptive (the default) against fixed levels, and what it answers.

Cases (each a real `satbench sweep` in a fresh subprocess, timed wall-clock):

- sim: the fake llama.cpp server (tests/fakes, its own process) with 4 slots, 10 ms decode iterations,
  prompt 128 / output 32 tokens, reached with --url. The right answer is 4, binding slots, with the
  server's busy slots full and requests deferred one level above.
- embedded: the default `satbench sweep` (Gemma 3 270M Q4_K_M, embedded llama.cpp).
- lanes: `satbench sweep --lanes examples/lanes.toml --with-fairness` (dense Gemma + SYNTHETIC V4).

Fixed runs add `--concurrency 1,2,4,8` (for lanes: `concurrency = [1, 2, 4, 8]` in a copy of the file).
Prints one row per run: case, mode, wall seconds, the recommended concurrency per lane, its binding
reason and the server-side signs of saturation. Targets (issue 22): sim <= 25 s, embedded <= 120 s,
lanes <= 300 s on a quiet 2-core host.

    python benchmarks/time_to_answer.py [--cases sim,embedded,lanes] [--modes adaptive,fixed] [--runs 1]
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
TARGET_S = {"sim": 25, "embedded": 120, "lanes": 300}


def start_fake(tmp: Path) -> tuple[subprocess.Popen, str]:
    (tmp / "script.json").write_text(json.dumps({"n_slots": 4, "decode_iteration_ms": 10.0}))
    ready = tmp / "ready.json"
    proc = subprocess.Popen([sys.executable, str(FAKE), "--port", "0", "--script", str(tmp / "script.json"),
                             "--ready-file", str(ready)], stderr=subprocess.DEVNULL)
    while not ready.exists():
        if proc.poll() is not None:
            raise SystemExit("the fake server did not start")
        time.sleep(0.02)
    return proc, json.loads(ready.read_text())["base_url"]


def command(case: str, mode: str, tmp: Path, url: str | None) -> list[str]:
    base = [sys.executable, "-m", "satbench.cli.main", "sweep"]
    fixed = ["--concurrency", "1,2,4,8"] if mode == "fixed" else []
    if case == "sim":
        return base + ["--url", str(url), "--prompt-tokens", "128", "--output-tokens", "32", *fixed]
    if case == "embedded":
        return base + fixed
    lanes = ROOT / "examples" / "lanes.toml"
    if mode == "fixed":
        text = lanes.read_text().replace('runtime = "embedded"\n',
                                         'runtime = "embedded"\nconcurrency = [1, 2, 4, 8]\n')
        lanes = tmp / "lanes-fixed.toml"
        lanes.write_text(text)
    return base + ["--lanes", str(lanes), "--with-fairness"]


def answer(run_dir: Path) -> list[str]:
    recs = json.loads((run_dir / "recommendations.json").read_text())
    out = []
    for r in recs["lanes"]:
        c = r["server_confirmation"]
        signs = [w for w, on in (("slots full", c["slots_saturated"]), ("deferred", c["requests_deferred"]))
                 if on]
        rec = r["recommended_concurrency"] if r["recommended_concurrency"] is not None else (
            "undetermined" if r.get("undetermined") else "none")
        out.append(f"{r['lane']}={rec} ({r['binding']['reason']}; {', '.join(signs) or 'no server signs'}"
                   f"{'; CONTENDED' if r.get('contended') else ''})")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="sim,embedded,lanes")
    ap.add_argument("--modes", default="adaptive,fixed")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--keep", help="keep the run directories under this directory")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(a.keep) if a.keep else Path(d)
        tmp.mkdir(parents=True, exist_ok=True)
        proc, url = start_fake(tmp) if "sim" in a.cases else (None, None)
        try:
            for case in a.cases.split(","):
                for mode in a.modes.split(","):
                    for i in range(a.runs):
                        run_dir = tmp / f"{case}-{mode}-{i}"
                        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
                        t0 = time.monotonic()
                        done = subprocess.run(command(case, mode, tmp, url) + ["-o", str(run_dir)], cwd=ROOT,
                                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                        wall = time.monotonic() - t0
                        # exit 6: a fairness check failed, a finding like any other (the answer stands)
                        ok = done.returncode in (0, 6) and (run_dir / "recommendations.json").exists()
                        got = answer(run_dir) if ok else [f"exit {done.returncode}: "
                                                          f"{done.stderr.decode()[-200:]}"]
                        if done.returncode == 6:
                            got.append("a fairness check failed (exit 6)")
                        row = f"| {case} | {mode} | {wall:.1f} | {TARGET_S[case]} | {'; '.join(got)} |"
                        rows.append(row)
                        print(row, flush=True)
        finally:
            if proc is not None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=30)
    print("\n| case | mode | wall s | target s (adaptive) | answer per lane (binding; server-side signs) |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
