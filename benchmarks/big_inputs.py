"""What big inputs cost: wall seconds and peak memory (VmHWM) of one process reading them.

Cases, each a fresh subprocess:

- lengths: a lengths file (`--prompt-tokens jsonl:PATH`) of 6,000,000 ten-byte lines (`     4096`:
  60 MB, under the 64 MiB file cap), which the 1,000,000-length cap (config.limits.MAX_LENGTHS_LINES)
  refuses; read as the sweep reads it.
- analyze / verify: the committed dense + V4 bundle (evidence/cpu-2core-2026-12-01/run) with
  --sampler-lines extra `server_samples.jsonl` lines (copies of its own, 10⁶ by default) and
  --event-lines extra `events.jsonl` request lines (copies of its own solo requests, as a longer
  sweep writes them, or with --copy-requests all of every request, its fairness records included,
  which no run writes; none by default); SHA256SUMS updated so that verify reads everything rather
  than stopping at the changed hash. Extra requests change the figures, so verify then reports the
  derived files inconsistent: the row is there for its time and memory.
- caps: analyze of the same bundle with each run-directory cap's number of lines (analyzed whole,
  then recommend and report with its plots), then one more (refused at the cap, without reading the
  rest): config.limits.MAX_SAMPLES samples, MAX_EVENTS events (the extra ones solo requests, as
  above), each alone.

    python benchmarks/big_inputs.py [--cases lengths,analyze,verify,caps] [--sampler-lines 1000000]
        [--event-lines 0] [--copy-requests solo|all]
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
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


# the child's own peak: VmHWM starts afresh at exec (ru_maxrss would carry over the forking parent's)
PEAK = ("\nimport re\nprint('peak_kib', re.search(r'VmHWM:\\s+(\\d+)', "
        "open('/proc/self/status').read()).group(1))\n")
CLI = "from satbench.cli.main import main\ncode = main({argv!r})\n"
EXIT = "raise SystemExit(code)\n"  # after PEAK: the CLI's own exit status


def _child(code: str) -> tuple[float, float, str]:
    """(wall s, peak RSS MiB: its VmHWM, what it said last) of a fresh python running `code`."""
    t0 = time.monotonic()
    tail = PEAK + (EXIT if code.startswith(CLI[:30]) else "")
    done = subprocess.run([sys.executable, "-c", code + tail], capture_output=True, text=True, check=False,
                          env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})
    wall = time.monotonic() - t0
    lines = (done.stdout + done.stderr).strip().splitlines()
    peak = next((int(ln.split()[1]) for ln in lines if ln.startswith("peak_kib ")), 0) / 1024
    said = [ln for ln in lines if not ln.startswith("peak_kib ")]
    return wall, peak, f"exit {done.returncode}: {said[-1][:140] if said else ''}"


def _bundle_with(tmp: Path, sampler_lines: int, event_lines: int, name: str = "run",
                 copy: str = "solo") -> Path:
    """The committed bundle unpacked under `tmp`/`name`, with extra copies of its own sample lines
    and request lines (`copy`: its solo ones, or all) appended, and SHA256SUMS updated for both."""
    sys.path.insert(0, str(ROOT))
    from tests.bundles import unpacked_copy

    run = unpacked_copy(BUNDLE, tmp / name)
    requests = (b'"kind":"request"', b'"scenario":"solo"') if copy == "solo" else (b'"kind":"request"',)
    for file, extra, keep in (("server_samples.jsonl", sampler_lines, ()),
                              ("events.jsonl", event_lines, requests)):
        path = run / file
        own = [ln for ln in path.read_bytes().splitlines(keepends=True) if all(k in ln for k in keep)]
        with path.open("ab") as fh:
            for i in range(extra):
                fh.write(own[i % len(own)])
        with path.open("rb") as fh:
            digest = hashlib.file_digest(fh, "sha256").hexdigest()
        sums = run / "SHA256SUMS"
        sums.write_text("".join(f"{digest}  {file}\n" if ln.endswith(f"  {file}") else ln + "\n"
                                for ln in sums.read_text().splitlines()))
    return run


def _lines(path: Path) -> int:
    with path.open("rb") as fh:
        return sum(1 for _ in fh)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="lengths,analyze,verify,caps")
    ap.add_argument("--sampler-lines", type=int, default=1_000_000)
    ap.add_argument("--event-lines", type=int, default=0)
    ap.add_argument("--copy-requests", choices=("solo", "all"), default="solo")
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
            run = _bundle_with(tmp, a.sampler_lines, a.event_lines, copy=a.copy_requests)
            size = sum((run / f).stat().st_size for f in ("server_samples.jsonl", "events.jsonl")) / 2**20
            print(f"# the bundle with {a.sampler_lines:,} extra sampler lines and {a.event_lines:,} extra "
                  f"{a.copy_requests} request lines ({size:.0f} MiB of raw files)", flush=True)
            for case in ("analyze", "verify"):
                if case in cases:
                    wall, peak, said = _child(CLI.format(argv=[case, str(run)]))
                    print(f"{case:>8} {wall:>7.1f} {peak:>9.0f}  {said}", flush=True)
        if "caps" in cases:
            from satbench.config.limits import MAX_EVENTS, MAX_SAMPLES

            for what, file, cap in (("samples", "server_samples.jsonl", MAX_SAMPLES),
                                    ("events", "events.jsonl", MAX_EVENTS)):
                have = _lines(_bundle_with(tmp, 0, 0, f"probe-{what}") / file)
                for lines in (cap, cap + 1):  # analyzed whole at the cap; refused one line past it
                    extra = lines - have
                    samples, events = (extra, 0) if what == "samples" else (0, extra)
                    run = _bundle_with(tmp, samples, events, f"cap-{what}-{lines}")
                    print(f"# {file} of {lines:,} lines (cap {cap:,})", flush=True)
                    # at the cap the rest of the derivation follows: recommend, and report with plots
                    for step in ("analyze", "recommend", "report") if lines == cap else ("analyze",):
                        wall, peak, said = _child(CLI.format(argv=[step, str(run)]))
                        print(f"{step:>8} {wall:>7.1f} {peak:>9.0f}  {said}", flush=True)
                    shutil.rmtree(run)


if __name__ == "__main__":
    main()
