"""How long satbench takes to answer, adaptive (the default) against fixed levels, and what it answers;
beside it, servebench's find-capacity against the same fake server.

Cases (each a real command in a fresh subprocess, timed wall-clock):

- sim: the fake llama.cpp server (tests/fakes, its own process) with 4 slots, 10 ms decode iterations,
  prompt 128 / output 32 tokens, reached with --url. The right answer is 4, binding slots, with the
  server's busy slots full and requests deferred one level above.
- servebench: `servebench find-capacity` (1.1.3, from --servebench PATH; skipped, saying so, without
  it) against the sim case's fake server with the same request shape, over the same levels (1 to 8,
  --max 8) with its default SLOs (p90 of requests within TTFT 500 ms and TPOT 50 ms). Its answer is
  the highest load meeting those SLOs, which is not satbench's question: the row is there for the time.
- plateau: the fake with 8 slots on issue 31's plateau (PLATEAU_ITERATION_MS: throughput flat from
  N = 1 to 2, then rising to 1.4× at 4 and 1.6× at 8), prompt 128 / output 32, reached with --url.
  The right answer is 8 (rising to the slots), not 1.
- embedded: the default `satbench sweep` (Gemma 3 270M Q4_K_M, embedded llama.cpp).
- lanes: `satbench sweep --lanes examples/lanes.toml --with-fairness` (dense Gemma + SYNTHETIC V4).

Fixed runs add `--concurrency 1,2,4,8` (for lanes: `concurrency = [1, 2, 4, 8]` in a copy of the file);
servebench has one mode. Prints one row per run: case, mode, wall seconds, target, the recommended
concurrency per lane, its binding reason and the server-side signs of saturation (right/WRONG where the
answer is known), then satbench's adaptive sim time ÷ servebench's per run. Targets on a quiet 2-core
host (issue 35): sim adaptive ≤ 0.7 × servebench's find-capacity time, embedded ≤ 90 s, lanes ≤ 300 s.

    python benchmarks/time_to_answer.py [--cases sim,servebench,plateau,embedded,lanes]
        [--modes adaptive,fixed] [--runs 1] [--servebench /work/bench-venv/bin/servebench]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fake_proc import ROOT, start_fake, stop_fake

sys.path.insert(0, str(ROOT))
from tests.fakes.fake_script import PLATEAU_ITERATION_MS

SHAPE = ["--prompt-tokens", "128", "--output-tokens", "32"]
FAKES = {"sim": {"n_slots": 4, "decode_iteration_ms": 10.0},
         "plateau": {"n_slots": 8, "decode_iteration_ms_by_batch": list(PLATEAU_ITERATION_MS)}}
FAKE_OF = {"sim": "sim", "servebench": "sim", "plateau": "plateau"}  # the fake server each case drives
RIGHT = {"sim": 4, "plateau": 8}  # the recommended concurrency a correct answer gives
SIM_RATIO_TARGET = 0.7  # the sim case's wall time ÷ servebench find-capacity's, at most
TARGET = {"sim": f"{SIM_RATIO_TARGET}× servebench", "embedded": "90", "lanes": "300"}
# servebench find-capacity: the same shape and levels as the sim case, its default SLOs spelled out
SERVEBENCH = ["find-capacity", "--model", "fake-model", "--endpoint", "completions", "--input-len", "128",
              "--output-len", "32", "--mode", "concurrency", "--start", "1", "--max", "8",
              "--slo-ttft-ms", "500", "--slo-tpot-ms", "50", "--target", "0.9"]


def command(case: str, mode: str, tmp: Path, url: str | None, servebench: str | None, out: Path) -> list[str]:
    if case == "servebench":
        return [str(servebench), *SERVEBENCH, "--url", f"{url}/v1", "--out", str(out)]
    base = [sys.executable, "-m", "satbench.cli.main", "sweep"]
    fixed = ["--concurrency", "1,2,4,8"] if mode == "fixed" else []
    tail = ["-o", str(out)]
    if case in FAKES:
        return base + ["--url", str(url), *SHAPE, *fixed] + tail
    if case == "embedded":
        return base + fixed + tail
    lanes = ROOT / "examples" / "lanes.toml"
    if mode == "fixed":
        text = lanes.read_text().replace('runtime = "embedded"\n',
                                         'runtime = "embedded"\nconcurrency = [1, 2, 4, 8]\n')
        lanes = tmp / "lanes-fixed.toml"
        lanes.write_text(text)
    return base + ["--lanes", str(lanes), "--with-fairness"] + tail


def answer(case: str, run_dir: Path) -> list[str]:
    recs = json.loads((run_dir / "recommendations.json").read_text())
    out = []
    for r in recs["lanes"]:
        c = r["server_confirmation"]
        signs = [w for w, on in (("slots full", c["slots_saturated"]), ("deferred", c["requests_deferred"]))
                 if on]
        rec = r["recommended_concurrency"] if r["recommended_concurrency"] is not None else "none"
        span = r.get("recommended_range")
        shown = f"{rec} (between {span[0]} and {span[1]})" if span else str(rec)
        verdict = ("" if case not in RIGHT else " right" if rec == RIGHT[case] and not span
                   else f" WRONG, not {RIGHT[case]}" if not span or not span[0] <= RIGHT[case] <= span[1]
                   else " unsettled")
        p = (r.get("confidence") or {}).get("p_by_level") or {}
        probs = "; P(gain) " + ", ".join(f"N={n}: {v}" for n, v in p.items()) if p else ""
        out.append(f"{r['lane']}={shown}{verdict} ({r['binding']['reason']}; "
                   f"{', '.join(signs) or 'no server signs'}{'; CONTENDED' if r.get('contended') else ''}"
                   f"{probs}; curve {r.get('curve_shape', '')})")
    return out


def servebench_answer(out: Path) -> list[str]:
    result = json.loads(out.read_text())
    cap, levels = result["capacity"], sorted(lv["value"] for lv in result["levels"])
    return [f"capacity={cap['capacity']} ({cap['reason']}; first fail {cap['first_fail']}; "
            f"levels {', '.join(f'{v:g}' for v in levels)})"]


def run_one(case: str, mode: str, tmp: Path, url: str | None, servebench: str | None,
            run_dir: Path) -> tuple[float, list[str]]:
    """Wall seconds and the answer of one run."""
    out = run_dir.with_suffix(".json") if case == "servebench" else run_dir
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    t0 = time.monotonic()
    done = subprocess.run(command(case, mode, tmp, url, servebench, out), cwd=ROOT, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.monotonic() - t0
    if case == "servebench":
        ok = done.returncode == 0 and out.exists()
        return wall, (servebench_answer(out) if ok
                      else [f"exit {done.returncode}: {done.stderr.decode()[-200:]}"])
    # exit 6: a fairness check failed, a finding like any other (the answer stands)
    ok = done.returncode in (0, 6) and (run_dir / "recommendations.json").exists()
    got = answer(case, run_dir) if ok else [f"exit {done.returncode}: {done.stderr.decode()[-200:]}"]
    if done.returncode == 6:
        got.append("a fairness check failed (exit 6)")
    return wall, got


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="sim,servebench,plateau,embedded,lanes")
    ap.add_argument("--modes", default="adaptive,fixed")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--servebench", help="the servebench 1.1.3 executable (its case is skipped without it)")
    ap.add_argument("--keep", help="keep the run directories under this directory")
    a = ap.parse_args()
    cases = a.cases.split(",")
    servebench = a.servebench if a.servebench and os.access(a.servebench, os.X_OK) else None
    if "servebench" in cases and servebench is None:
        why = f"not executable: {a.servebench}" if a.servebench else "no --servebench PATH"
        print(f"servebench: skipped ({why})", flush=True)
        cases.remove("servebench")
    rows, walls = [], {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(a.keep) if a.keep else Path(d)
        tmp.mkdir(parents=True, exist_ok=True)
        fakes = {name: start_fake(FAKES[name], tmp, name) for name in sorted({FAKE_OF[c] for c in cases
                                                                                if c in FAKE_OF})}
        try:
            for case in cases:
                for mode in ["find-capacity"] if case == "servebench" else a.modes.split(","):
                    for i in range(a.runs):
                        url = fakes[FAKE_OF[case]][1] if case in FAKE_OF else None
                        wall, got = run_one(case, mode, tmp, url, servebench, tmp / f"{case}-{mode}-{i}")
                        walls[case, mode, i] = wall
                        row = f"| {case} | {mode} | {wall:.1f} | {TARGET.get(case, '-')} | {'; '.join(got)} |"
                        rows.append(row)
                        print(row, flush=True)
        finally:
            for proc, _ in fakes.values():
                stop_fake(proc)
    print("\n| case | mode | wall s | target s (adaptive) | answer per lane (binding; server-side signs) |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))
    for i in range(a.runs):
        sim, sb = walls.get(("sim", "adaptive", i)), walls.get(("servebench", "find-capacity", i))
        if sim is not None and sb is not None:
            print(f"run {i}: satbench sim adaptive {sim:.1f} s ÷ servebench find-capacity {sb:.1f} s = "
                  f"{sim / sb:.2f} (target ≤ {SIM_RATIO_TARGET})")


if __name__ == "__main__":
    main()
