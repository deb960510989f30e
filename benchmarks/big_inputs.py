"""What big inputs cost: wall seconds and peak memory (max RSS) of one process reading them.

Cases, each a fresh subprocess:

- lengths: a lengths file (`--prompt-tokens jsonl:PATH`) of 6,000,000 ten-byte lines (`     4096`:
  60 MB, under the 64 MiB file cap), which the 1,000,000-length cap (config.limits.MAX_LENGTHS_LINES)
  refuses; read as the sweep reads it.
- analyze / verify: the committed dense + V4 bundle (evidence/cpu-2core-2026-12-01/run) with
  --sampler-lines extra `server_samples.jsonl` lines (copies of its own, 10⁶ by default; SHA256SUMS
  updated so that verify reads everything rather than stopping at the changed hash).

    python benchmarks/big_inputs.py [--cases lengths,analyze,verify] [--sampler-lines 1000000]
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUNDLE = ROOT / "evidence" / "cpu-2core-2026-12-01" / "run"

LENGTHS = """
from satbench.workload.lengths import parse_lengths
try:
    parse_lengths("jsonl:" + {path!r}, "prompt")
except ValueError as exc:
    print(str(exc)[-120:])
"""


PEAK = "\nimport resource\nprint('peak_kib', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
CLI = "from satbench.cli.main import main\ncode = main({argv!r})\n"


def _child(code: str) -> tuple[float, float, str]:
    """(wall s, peak RSS MiB, what it said last) of a fresh python running `code`."""
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code + PEAK], capture_output=True, text=True, check=False,
                          env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})
    wall = time.monotonic() - t0
    lines = (done.stdout + done.stderr).strip().splitlines()
    peak = next((int(ln.split()[1]) for ln in lines if ln.startswith("peak_kib ")), 0) / 1024
    said = [ln for ln in lines if not ln.startswith("peak_kib ")]
    return wall, peak, f"exit {done.returncode}: {said[-1][:140] if said else ''}"


def _bundle_with_samples(tmp: Path, extra: int) -> Path:
    sys.path.insert(0, str(ROOT))
    from tests.bundles import unpacked_copy

    run = unpacked_copy(BUNDLE, tmp / "run")
    samples = run / "server_samples.jsonl"
    own = samples.read_bytes().splitlines(keepends=True)
    with samples.open("ab") as fh:
        for i in range(extra):
            fh.write(own[i % len(own)])
    digest = hashlib.sha256(samples.read_bytes()).hexdigest()
    sums = run / "SHA256SUMS"
    sums.write_text("".join(f"{digest}  server_samples.jsonl\n" if ln.endswith("  server_samples.jsonl")
                            else ln + "\n" for ln in sums.read_text().splitlines()))
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="lengths,analyze,verify")
    ap.add_argument("--sampler-lines", type=int, default=1_000_000)
    a = ap.parse_args()
    cases = a.cases.split(",")
    print(f"{'case':>8} {'wall s':>7} {'peak MiB':>9}  outcome")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if "lengths" in cases:
            path = tmp / "lengths.jsonl"
            path.write_bytes(b"     4096\n" * 6_000_000)
            wall, peak, said = _child(LENGTHS.format(path=str(path)))
            print(f"{'lengths':>8} {wall:>7.1f} {peak:>9.0f}  {said}", flush=True)
        if {"analyze", "verify"} & set(cases):
            run = _bundle_with_samples(tmp, a.sampler_lines)
            size = (run / "server_samples.jsonl").stat().st_size / 2**20
            print(f"# the bundle with {a.sampler_lines:,} extra sampler lines ({size:.0f} MiB)", flush=True)
            for case in ("analyze", "verify"):
                if case in cases:
                    wall, peak, said = _child(CLI.format(argv=[case, str(run)]))
                    print(f"{case:>8} {wall:>7.1f} {peak:>9.0f}  {said}", flush=True)


if __name__ == "__main__":
    main()
