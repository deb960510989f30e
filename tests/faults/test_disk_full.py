"""The disk fills up or the run directory becomes unwritable: satbench stops cleanly with one line
naming the file and the cause (exit 5), run.json says "failed" where it can still be written,
every line that reached the disk is a valid record, and no server process is left behind."""

from __future__ import annotations

import errno
import json
import os
import re
import resource
import signal
import subprocess
import threading
import time

import psutil
import pytest

from satbench.cli.main import main
from satbench.records.writer import JsonlWriter
from tests.faults.common import (
    FAKE_BIN,
    all_lines_valid,
    analyzable,
    cli_subprocess,
    kept_vs_completed,
    one_error_line,
    requests,
    small_sweep,
    status_of,
    table_row,
)

LIMIT = 32 * 1024  # bytes per file: events.jsonl outgrows it mid-level, run.json and results.json fit


def _file_size_limit() -> None:  # in the child: writes past LIMIT fail with EFBIG, like a full disk
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))


def _run_limited(argv: list[str], timeout: float = 60) -> tuple[int, str]:
    proc = subprocess.run(cli_subprocess(argv), capture_output=True, text=True, timeout=timeout, check=False,
                          preexec_fn=_file_size_limit)
    return proc.returncode, proc.stderr


def test_file_too_large_mid_level(fake_server, tmp_path):
    fake = fake_server(n_slots=2, decode_iteration_ms=2.0)
    run_dir = tmp_path / "run"
    code, err = _run_limited(small_sweep(fake.base_url, run_dir, requests=120, output=8))
    line = one_error_line(err)
    assert code == 5
    assert re.fullmatch(rf"satbench: error: cannot write {run_dir}/events\.jsonl: File too large "
                        rf"\(run directory: {run_dir}\)", line), line
    assert status_of(run_dir) == "failed"
    assert "File too large" in json.loads((run_dir / "run.json").read_text())["status_reason"]
    assert os.path.getsize(run_dir / "events.jsonl") == LIMIT  # it really filled up
    all_lines_valid(run_dir / "events.jsonl")
    all_lines_valid(run_dir / "server_samples.jsonl")
    schedule = fake.stop()
    kept = len(requests(run_dir))  # every whole line is read back; a torn last one is ignored
    completed = len({r["id"] for r in schedule if r["status"] == "ok"})
    assert kept > 0 and completed - kept <= 3  # at most the record being written and the ones in flight
    analyzable(run_dir)
    table_row("disk full (events.jsonl)", f"RLIMIT_FSIZE={LIMIT} B, SIGXFSZ ignored (EFBIG)", code, line,
              "failed", kept, completed)


def test_file_too_large_stops_the_server_satbench_started(tiny_gguf, tmp_path):
    run_dir = tmp_path / "run"
    code, err = _run_limited(["sweep", "--server-bin", FAKE_BIN, "--model", str(tiny_gguf),
                              "--concurrency", "2", "--requests-per-level", "120", "--repetitions", "1",
                              "--prompt-tokens", "48", "--output-tokens", "8", "-o", str(run_dir)])
    line = one_error_line(err)
    assert code == 5 and "File too large" in line
    assert status_of(run_dir) == "failed"
    pid = json.loads((run_dir / "run.json").read_text())["provenance"]["lanes"]["default"]["runtime"]["pid"]
    assert not psutil.pid_exists(pid)
    all_lines_valid(run_dir / "events.jsonl")
    analyzable(run_dir)
    table_row("disk full (native server)", f"RLIMIT_FSIZE={LIMIT} B", code, line, "failed",
              len(requests(run_dir)), "n/a")


class _FillsUpAfter:
    """A JsonlWriter's file on a disk with `room` bytes left: then every write fails with ENOSPC.
    (A symlink to /dev/full fails the writes too, but reads back endless NULs, so nothing could
    analyze the run directory afterwards; a real full disk keeps what was written readable.)"""

    def __init__(self, fh, room: int) -> None:
        self.fh, self.room = fh, room
        self.failed_ns: int | None = None  # perf_counter_ns of the first failure (events.jsonl's clock)

    def write(self, text: str) -> int:
        if len(text) > self.room:
            self.room = 0
            if self.failed_ns is None:
                self.failed_ns = time.perf_counter_ns()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= len(text)
        return self.fh.write(text)

    def flush(self) -> None:
        self.fh.flush()

    def close(self) -> None:
        self.fh.close()


@pytest.mark.parametrize("name", ["events.jsonl", "server_samples.jsonl"])
def test_no_space_left_on_device(name, fake_server, tmp_path, capsys, monkeypatch):
    real_init = JsonlWriter.__init__

    def on_a_filling_disk(self, path, *args, **kw):
        real_init(self, path, *args, **kw)
        if path.name == name:
            self._fh = _FillsUpAfter(self._fh, 8000)  # a few requests' or samples' worth

    monkeypatch.setattr(JsonlWriter, "__init__", on_a_filling_disk)
    fake = fake_server(n_slots=2, decode_iteration_ms=5.0)
    run_dir = tmp_path / "run"
    code = main(small_sweep(fake.base_url, run_dir, levels="1,2", requests=40, output=8))
    line = one_error_line(capsys.readouterr().err)
    assert code == 5
    assert line == (f"satbench: error: cannot write {run_dir}/{name}: No space left on device "
                    f"(run directory: {run_dir})")
    assert status_of(run_dir) == "failed"
    all_lines_valid(run_dir / name)
    schedule = fake.stop()
    kept = len(requests(run_dir))
    completed = len({r["id"] for r in schedule if r["status"] == "ok"})
    assert kept > 0 and completed - kept <= 3  # at most the record being written and the ones in flight
    assert completed < 80  # it stopped at the failed write, not at the end of the run (82 requests)
    analyzable(run_dir)
    table_row(f"disk full ({name})", f"{name}: ENOSPC once 8000 B are written", code, line, "failed",
              kept, completed)


def _unwritable(path):
    """Make a directory refuse new files, also for root (chattr +i); returns the undo."""
    if os.geteuid() != 0:
        path.chmod(0o555)
        return lambda: path.chmod(0o755)
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True, check=False).returncode != 0:
        pytest.skip("running as root without chattr +i: cannot make a directory unwritable")
    return lambda: subprocess.run(["chattr", "-i", str(path)], check=True)


def _sweep_into_a_directory_locked_mid_level(fake, run_dir) -> int:
    undo = []

    def lock_when_measuring():
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            events = run_dir / "events.jsonl"
            if events.exists() and events.read_text().count('"phase":"measured"') >= 3:
                undo.append(_unwritable(run_dir))
                return
            time.sleep(0.005)

    locker = threading.Thread(target=lock_when_measuring)
    locker.start()
    try:
        code = main(small_sweep(fake.base_url, run_dir, requests=30, output=8))
    finally:
        locker.join()
        for u in undo:
            u()
    assert undo, "the directory was never locked"
    return code


def test_run_directory_becomes_unwritable(fake_server, tmp_path, capsys):
    fake = fake_server(n_slots=2, decode_iteration_ms=5.0)
    run_dir = tmp_path / "run"
    code = _sweep_into_a_directory_locked_mid_level(fake, run_dir)
    line = one_error_line(capsys.readouterr().err)
    assert code == 5
    assert re.fullmatch(rf"satbench: error: cannot write {run_dir}/(run|results)\.json: "
                        rf"(Operation not permitted|Permission denied) \(run directory: {run_dir}\)",
                        line), line
    # the raw files were open and kept taking records: everything measured is there and analyzable
    kept, completed = kept_vs_completed(run_dir, fake.stop())
    assert kept == completed == 32
    assert main(["analyze", str(run_dir)]) == 0
    table_row("run directory unwritable", "chattr +i (root) / chmod 555 mid-level", code, line,
              status_of(run_dir), kept, completed)


def test_unwritable_run_directory_reports_the_first_failed_write(fake_server, tmp_path, capsys):
    fake = fake_server(n_slots=2, decode_iteration_ms=5.0)
    run_dir = tmp_path / "run"
    assert _sweep_into_a_directory_locked_mid_level(fake, run_dir) == 5
    line = one_error_line(capsys.readouterr().err)
    assert line.startswith(f"satbench: error: cannot write {run_dir}/run.json: "), line


def test_no_space_left_during_an_open_loop_rate_stops_its_arrivals(fake_server, tmp_path, capsys,
                                                                   monkeypatch):
    """The first failed write of a rate's record stops the arrivals at once, as a failed stream stops a
    closed-loop level: one line, exit 5, run.json failed, no task exception left unretrieved."""
    real_init = JsonlWriter.__init__

    def on_a_filling_disk(self, path, *args, **kw):
        real_init(self, path, *args, **kw)
        if path.name == "events.jsonl":
            self._fh = _FillsUpAfter(self._fh, 60_000)  # the level's records and some of the rate's

    monkeypatch.setattr(JsonlWriter, "__init__", on_a_filling_disk)
    fake = fake_server(n_slots=2, decode_iteration_ms=2.0)
    run_dir = tmp_path / "run"
    code = main(small_sweep(fake.base_url, run_dir, requests=16, output=4,
                            extra=("--rate", "40", "--rate-requests", "2000")))
    err = capsys.readouterr().err
    assert "never retrieved" not in err and "Traceback" not in err, err[-3000:]
    line = one_error_line(err)
    assert code == 5 and line.startswith(f"satbench: error: cannot write {run_dir}/events.jsonl: No space")
    assert status_of(run_dir) == "failed"
    schedule = fake.stop()
    # ~75 records fit in 60,000 bytes; the arrivals went on to all 2,000 before (over 50 s)
    assert len(schedule) < 300, len(schedule)
    all_lines_valid(run_dir / "events.jsonl")
