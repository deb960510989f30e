"""How much CPU do `satbench analyze`, `satbench recommend` and `satbench report` cost on a large run?

Produces the run directory for real: starts the fake llama.cpp server (tests/fakes, its own
process) and runs `satbench sweep --url <fake> --concurrency N --requests-per-level R
--repetitions 1 --prompt-tokens 128 --output-tokens 128` once (or reuses --run-dir). Then, each
in a fresh subprocess (imports and interpreter start-up counted, as a user sees them), times
`satbench analyze DIR`, `satbench recommend DIR` and `satbench report DIR` --runs times: CPU =
user + sys of the child (os.wait4), with wall seconds beside; the table prints min and median next
to the targets of issues 22 and 35 (analyze <= 1 s CPU, recommend <= 0.5 s CPU, report <= 2 s CPU,
the plots included, on 32 streams x 1,024 requests of 128 output tokens, ~135k tokens).

Bytecode: the children compile each module once, into a bytecode cache of their own
(PYTHONPYCACHEPREFIX, a temporary directory; PYTHONDONTWRITEBYTECODE dropped), during one untimed
run of each command, and read it in the timed runs, as an installed satbench (pip compiles it)
would. A checkout whose __pycache__ is stale under PYTHONDONTWRITEBYTECODE=1 would otherwise compile
every edited module on every run and time that too; --no-bytecode-cache keeps the environment as
it is.

Then, in this process (imports already paid), the split of the derivation, CPU seconds
(time.process_time) of each part, min over --runs:
- analyze: read_manifest, read_events (+ current_session_records), read_samples, the per-level
  metrics (analyze_run − the reads), writing results.json;
- recommend: the recommendations (results.json hashed; its content as analyze_run gave it), writing
  recommendations.json;
- report: read_results, read_events (the plots' request events), the plots, results.csv, the
  evidence (EVIDENCE.md + report.html), SHA256SUMS.

    python benchmarks/derive_cost.py [--streams 32] [--requests 1024] [--decode-ms 2]
                                     [--runs 5] [--run-dir DIR] [--keep] [--no-bytecode-cache]

Runs from a checkout without installing satbench (the children get the same `satbench` package
on PYTHONPATH).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

ROOT = Path(__file__).resolve().parents[1]
FAKE = ROOT / "tests" / "fakes" / "fake_llama_server.py"
try:
    import satbench
except ImportError:
    sys.path.insert(0, str(ROOT / "src"))
    import satbench

SRC = str(Path(satbench.__file__).resolve().parents[1])
TARGET_CPU_S = {"analyze": 1.0, "recommend": 0.5, "report": 2.0}
T = TypeVar("T")


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def satbench_cmd(*args: str) -> list[str]:
    return [sys.executable, "-c", "import sys; from satbench.cli.main import main; sys.exit(main())", *args]


def start_fake(tmp: Path, script: dict) -> tuple[subprocess.Popen, str]:
    (tmp / "script.json").write_text(json.dumps(script))
    ready = tmp / "ready.json"
    proc = subprocess.Popen([sys.executable, str(FAKE), "--port", "0", "--script", str(tmp / "script.json"),
                             "--ready-file", str(ready)], stderr=subprocess.PIPE)
    assert proc.stderr is not None
    while not ready.exists():
        if proc.poll() is not None:
            raise SystemExit(f"fake server failed: {proc.stderr.read().decode()[-400:]}")
        time.sleep(0.02)
    return proc, json.loads(ready.read_text())["base_url"]


def make_run(run_dir: Path, streams: int, requests: int, decode_ms: float) -> None:
    """One real sweep against the fake into `run_dir`."""
    with tempfile.TemporaryDirectory() as d:
        proc, url = start_fake(Path(d), dict(n_slots=streams, decode_iteration_ms=decode_ms,
                                             prefill_ms_per_token=0.01, n_batch=4096))
        try:
            t0 = time.perf_counter()
            done = subprocess.run(satbench_cmd(
                "sweep", "--url", url, "--concurrency", str(streams), "--requests-per-level", str(requests),
                "--repetitions", "1", "--prompt-tokens", "128", "--output-tokens", "128", "-o", str(run_dir)),
                env=child_env(), capture_output=True, text=True)
            print(f"sweep: {time.perf_counter() - t0:.1f} s wall, exit {done.returncode}")
            if done.returncode != 0:
                raise SystemExit(f"sweep failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=30)


def child_cpu(args: list[str]) -> tuple[float, float]:
    """(CPU seconds = user + sys, wall seconds) of one `satbench ARGS` in a fresh process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(satbench_cmd(*args), env=child_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    assert proc.stderr is not None
    _, status, ru = os.wait4(proc.pid, 0)  # the child's own rusage: its CPU alone
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"satbench {' '.join(args)} failed: {proc.stderr.read().decode()[-2000:]}")
    proc.stderr.close()
    return ru.ru_utime + ru.ru_stime, wall


def cpu_of(fn: Callable[[], T]) -> tuple[float, T]:
    t0 = time.process_time()
    out = fn()
    return time.process_time() - t0, out


def split_once(run_dir: Path) -> dict[str, float]:
    """CPU seconds of each part of analyze and report, in this process, once."""
    from satbench.analysis.analyze import analyze_run
    from satbench.analysis.results import read_results, write_results
    from satbench.records.events import RequestEvent, current_session_records, read_events, read_samples
    from satbench.records.manifest import read_manifest
    from satbench.report import bundle
    from satbench.report.csvfile import write_csv
    from satbench.report.document import render_html, render_markdown
    from satbench.report.evidence import evidence_blocks
    from satbench.report.integrity import raw_hashes, write_sums
    from satbench.report.plots import write_plots
    from satbench.saturation.recommend import recommend
    from satbench.saturation.recommendations_file import write_recommendations

    out: dict[str, float] = {}
    out["analyze: read_manifest"], _ = cpu_of(lambda: read_manifest(run_dir))
    out["analyze: read_events + current_session_records"], _ = cpu_of(
        lambda: current_session_records(read_events(run_dir)))
    out["analyze: read_samples"], _ = cpu_of(lambda: read_samples(run_dir))
    total, results = cpu_of(lambda: analyze_run(run_dir))
    reads = sum(out.values())
    out["analyze: per-level metrics (analyze_run - reads)"] = max(0.0, total - reads)
    out["analyze: analyze_run total"] = total
    out["analyze: write results.json"], _ = cpu_of(lambda: write_results(run_dir, results))
    out["recommend: recommend"], made = cpu_of(lambda: recommend(run_dir, results))
    out["recommend: write recommendations.json"], _ = cpu_of(lambda: write_recommendations(run_dir, made))

    out["report: read_results"], found = cpu_of(lambda: read_results(run_dir))
    out["report: read_recommendations"], (recs, recs_sha) = cpu_of(
        lambda: bundle.read_recommendations(run_dir))
    out["report: read_events"], events = cpu_of(
        lambda: [e for e in read_events(run_dir) if isinstance(e, RequestEvent)])
    bundle._fresh_plots_dir(run_dir)
    out["report: plots"], plots = cpu_of(lambda: write_plots(run_dir, found, recs, events))
    out["report: results.csv"], _ = cpu_of(lambda: write_csv(run_dir, found))

    def evidence() -> None:
        resumes = read_manifest(run_dir).resumes
        blocks = evidence_blocks(found, recs, recs_sha, plots, raw_hashes(run_dir), resumes)
        render_markdown(blocks)
        render_html(blocks, run_dir, "x")
    out["report: evidence (md + html, not written)"], _ = cpu_of(evidence)
    out["report: SHA256SUMS"], _ = cpu_of(lambda: write_sums(run_dir))
    return out


def split(run_dir: Path, runs: int) -> dict[str, float]:
    """`split_once`, min over `runs`."""
    best: dict[str, float] = {}
    for _ in range(runs):
        for name, s in split_once(run_dir).items():
            best[name] = min(best.get(name, float("inf")), s)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=32)
    ap.add_argument("--requests", type=int, default=1024, help="measured requests of the level")
    ap.add_argument("--decode-ms", type=float, default=2.0, help="fake decode iteration (all slots)")
    ap.add_argument("--runs", type=int, default=5, help="timed runs of each command")
    ap.add_argument("--run-dir", type=Path, help="reuse this run directory (no sweep)")
    ap.add_argument("--keep", action="store_true", help="keep the run directory made and print its path")
    ap.add_argument("--no-bytecode-cache", action="store_true",
                    help="children inherit PYTHONDONTWRITEBYTECODE and PYTHONPYCACHEPREFIX as they are")
    a = ap.parse_args()
    bytecode = None if a.no_bytecode_cache else tempfile.mkdtemp(prefix="satbench-derive-pyc-")
    if bytecode is not None:  # inherited by every child (child_env copies os.environ)
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        os.environ["PYTHONPYCACHEPREFIX"] = bytecode

    tmp = None
    if a.run_dir is not None:
        run_dir = a.run_dir
    else:
        tmp = Path(tempfile.mkdtemp(prefix="satbench-derive-"))
        run_dir = tmp / "run"
        make_run(run_dir, a.streams, a.requests, a.decode_ms)
    try:
        n_bytes = (run_dir / "events.jsonl").stat().st_size
        n_lines = sum(1 for _ in (run_dir / "events.jsonl").open("rb"))
        print(f"run {run_dir}: events.jsonl {n_lines:,} lines, {n_bytes / 1e6:.1f} MB · "
              f"load avg {os.getloadavg()[0]:.2f} · bytecode "
              f"{'as the environment has it' if bytecode is None else 'cached (compiled in an untimed run)'}")
        for cmd in ("analyze", "recommend", "report"):  # untimed: the files as each writes them for the next,
            child_cpu([cmd, str(run_dir)])  # and every module compiled once
        head = f"{'command':<10} {'CPU min':>8} {'CPU median':>10} {'wall median':>11} {'target CPU':>10}"
        print(head)
        print("-" * len(head))
        for cmd in ("analyze", "recommend", "report"):
            cpu, wall = zip(*(child_cpu([cmd, str(run_dir)]) for _ in range(a.runs)))
            print(f"{cmd:<10} {min(cpu):>7.2f}s {statistics.median(cpu):>9.2f}s "
                  f"{statistics.median(wall):>10.2f}s {'<= ' + format(TARGET_CPU_S[cmd], 'g') + ' s':>10}")
        print(f"\nin-process split (CPU s, min of {a.runs}; imports already paid):")
        for name, s in split(run_dir, a.runs).items():
            print(f"  {name:<50} {s:>6.3f}")
        sys_s, _ = child_cpu(["--version"])
        print(f"  {'(a fresh `satbench --version`: interpreter + CLI)':<50} {sys_s:>6.3f}")
    finally:
        if bytecode is not None:
            shutil.rmtree(bytecode)
        if tmp is not None:
            if a.keep:
                print(f"kept {run_dir}")
            else:
                shutil.rmtree(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
