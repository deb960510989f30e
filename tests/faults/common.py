"""What every fault test checks: the user's one line, the exit code, run.json's status, an
analyzable run directory, and records kept vs records the server completed before the fault.

Each test prints one `FAULT |` line (pytest -s shows them): the fault table of the issue.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from satbench.cli.main import main
from satbench.records.events import RequestEvent, read_events
from satbench.records.manifest import read_manifest

ROOT = Path(__file__).resolve().parents[2]
FAKE_BIN = str(ROOT / "tests" / "fakes" / "fake_llama_server_bin.py")


def small_sweep(url: str, run_dir: Path, *, levels: str = "2", requests: int = 8, output: int = 4,
                extra: tuple[str, ...] = ()) -> list[str]:
    """argv of a small sweep against `url` (one repetition)."""
    return ["sweep", "--url", url, "--concurrency", levels, "--requests-per-level", str(requests),
            "--repetitions", "1", "--prompt-tokens", "16", "--output-tokens", str(output), "-o", str(run_dir),
            *extra]


def cli_subprocess(argv: list[str]) -> list[str]:
    return [sys.executable, "-m", "satbench.cli.main", *argv]


def one_error_line(err: str) -> str:
    """The user sees exactly one satbench line, last, and no traceback (lines above are the progress
    bar's)."""
    assert "Traceback" not in err, err[-3000:]
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    ours = [ln for ln in lines if ln.startswith("satbench:")]
    assert len(ours) == 1, err[-3000:]
    assert lines[-1] == ours[0], err[-3000:]
    return ours[0]


def requests(run_dir: Path) -> list[RequestEvent]:
    return [e for e in read_events(run_dir) if isinstance(e, RequestEvent)]


def served_ok(schedule: list[dict], before_ns: int | None = None) -> set[str]:
    """Request ids the fake served completely and correctly (its schedule log says "ok"), those
    finished before `before_ns` only when given (the fake's clock is CLOCK_MONOTONIC, like ours)."""
    return {r["id"] for r in schedule
            if r.get("status") == "ok" and (before_ns is None or r["end_ns"] < before_ns)}


def kept_vs_completed(run_dir: Path, schedule: list[dict], before_ns: int | None = None) -> tuple[int, int]:
    """Every request the server completed is on disk as a successful record; (kept, completed)."""
    ok_events = {e.request_id for e in requests(run_dir) if e.ok}
    completed = served_ok(schedule, before_ns)
    assert completed, "the fault came before the server completed anything: the test proves nothing"
    assert completed <= ok_events, f"lost: {sorted(completed - ok_events)}"
    return len(ok_events), len(completed)


def status_of(run_dir: Path) -> str:
    return read_manifest(run_dir).status


def analyzable(run_dir: Path) -> dict:
    """`satbench analyze` works on what was left (every raw line valid) and agrees with run.json."""
    assert main(["analyze", str(run_dir)]) == 0
    results = json.loads((run_dir / "results.json").read_text())
    assert results["status"] == status_of(run_dir)
    return results


def all_lines_valid(path: Path) -> int:
    """Every complete line of a JSONL file is JSON (a last line cut by the fault may be partial)."""
    text = path.read_text()
    lines = text.split("\n")
    complete = lines[:-1]  # after the last "\n": empty, or a torn line
    for ln in complete:
        json.loads(ln)
    return len(complete)


def table_row(fault: str, injected: str, code: int, line: str, status: str, kept: object,
              completed: object) -> None:
    print(f"\nFAULT | {fault} | {injected} | exit {code}: {line} | {status} | "
          f"kept {kept} / completed {completed}")


def native_bundle(base: Path) -> Path:
    """A small real run directory under `base`: a tiny synthetic llama GGUF served by the stand-in
    llama-server (FAKE_BIN) at concurrency 2, with its report written."""
    from satbench.gguf.synthetic import write_synthetic_gguf

    model = base / "tiny.gguf"
    write_synthetic_gguf(model, "llama", "tiny", 1)
    run = base / "run"
    assert main(["sweep", "--server-bin", FAKE_BIN, "--model", str(model), "--concurrency", "2",
                 "--requests-per-level", "4", "--repetitions", "1", "--prompt-tokens", "64",
                 "--output-tokens", "4", "-o", str(run)]) == 0
    return run
