"""The server process SIGKILLed mid-level, during warmup and during startup: one line, exit 4, and
every request the server completed before it died kept on disk. A run that measured something
before the server died ends "complete" with the failure in run.json's server_failures, and the
recommendation stays below the level that failed; one that measured nothing ends "failed"."""

from __future__ import annotations

import json

import psutil

from satbench.cli.main import main
from satbench.records.events import LevelMark, read_events
from tests.faults.common import (
    FAKE_BIN,
    analyzable,
    kept_vs_completed,
    one_error_line,
    requests,
    small_sweep,
    status_of,
    table_row,
)


def level_end(run_dir, level):
    return next(m for m in read_events(run_dir) if isinstance(m, LevelMark) and m.kind == "level_end"
                and m.level == level)


def test_killed_mid_level(fake_server, tmp_path, capsys):
    # completions: level 1 = 1 warmup + 8 measured (1-9), level 2 = 2 warmups (10, 11) + measured (12-19)
    fake = fake_server(n_slots=2, decode_iteration_ms=5.0, die_at_completion=14)
    run_dir = tmp_path / "run"
    code = main(small_sweep(fake.base_url, run_dir, levels="1,2"))
    line = one_error_line(capsys.readouterr().err)
    assert code == 4
    assert line.startswith("satbench: lane default: level 2 (repetition 1) failed: ")
    assert "could not reach the server" in line and "the rest of the run was measured and written" in line
    assert status_of(run_dir) == "complete"  # level 1 was measured
    failure, = json.loads((run_dir / "run.json").read_text())["server_failures"]
    assert (failure["level"], failure["unit"], failure["restarted"]) == (2, "solo/default/2/1", False)
    rec = json.loads((run_dir / "recommendations.json").read_text())["lanes"][0]
    assert rec["recommended_concurrency"] == 1 and rec["binding"]["reason"] == "server_failed"
    assert rec["server_failure_cap"] == 1
    kept, completed = kept_vs_completed(run_dir, fake.stop())
    assert completed == 12  # level 1 whole, level 2's warmups and its first measured request
    assert level_end(run_dir, 1).status == "complete" and level_end(run_dir, 2).status == "failed"
    lost = [e for e in requests(run_dir) if not e.ok]
    assert lost and all(e.level == 2 for e in lost)
    assert {e.error.type for e in lost} <= {"connection_dropped", "stream_broken"}
    results = analyzable(run_dir)
    assert results["lanes"][0]["levels"][0]["counts"]["requests_ok"] == 8
    table_row("SIGKILL mid-level", "fake die_at_completion=14 (level 2, 3rd measured)", code, line,
              "complete", kept, completed)


def test_killed_during_warmup(fake_server, tmp_path, capsys):
    fake = fake_server(n_slots=2, decode_iteration_ms=5.0, die_at_completion=10)  # level 2's first warmup
    run_dir = tmp_path / "run"
    code = main(small_sweep(fake.base_url, run_dir, levels="1,2"))
    line = one_error_line(capsys.readouterr().err)
    assert code == 4 and "level 2 (repetition 1) failed" in line and "could not reach the server" in line
    assert status_of(run_dir) == "complete"
    kept, completed = kept_vs_completed(run_dir, fake.stop())
    assert completed == 9 and kept == 9  # level 1 whole; nothing of level 2 completed
    warm = [e for e in requests(run_dir) if e.level == 2 and e.phase == "warmup"]
    assert len(warm) == 2 and not any(e.ok for e in warm)
    analyzable(run_dir)
    table_row("SIGKILL during warmup", "fake die_at_completion=10 (level 2's first warmup)", code, line,
              "complete", kept, completed)


def test_killed_during_startup(tiny_gguf, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FAKE_BIN_DIE_AT_STARTUP", "1")
    run_dir = tmp_path / "run"
    code = main(["sweep", "--server-bin", FAKE_BIN, "--model", str(tiny_gguf), "--concurrency", "2",
                 "--requests-per-level", "8", "--repetitions", "1", "-o", str(run_dir)])
    line = one_error_line(capsys.readouterr().err)
    assert code == 3
    assert line.startswith("satbench: error: llama-server killed by SIGKILL (signal 9) while loading: "
                           "no error in its log; last line: main: loading model")
    assert status_of(run_dir) == "failed"
    assert "SIGKILL" in json.loads((run_dir / "run.json").read_text())["status_reason"]
    assert not (run_dir / "events.jsonl").exists() or requests(run_dir) == []
    # nothing was measured: analyze says so in one line instead of failing obscurely
    assert main(["analyze", str(run_dir)]) == 5
    assert "nothing to analyze" in one_error_line(capsys.readouterr().err)
    table_row("SIGKILL during startup", "stand-in llama-server, FAKE_BIN_DIE_AT_STARTUP", code, line,
              "failed", 0, 0)


def test_native_server_killed_mid_level_leaves_no_process(tiny_gguf, tmp_path, capsys, monkeypatch):
    log = tmp_path / "schedule.jsonl"
    monkeypatch.setenv("FAKE_BIN_SCRIPT", json.dumps({"die_at_completion": 6, "schedule_log": str(log)}))
    run_dir = tmp_path / "run"
    code = main(["sweep", "--server-bin", FAKE_BIN, "--model", str(tiny_gguf), "--concurrency", "2",
                 "--requests-per-level", "8", "--repetitions", "1", "--prompt-tokens", "48",
                 "--output-tokens", "4", "-o", str(run_dir)])
    line = one_error_line(capsys.readouterr().err)
    assert code == 4
    assert "level 2 (repetition 1) failed: the server process was killed by SIGKILL (signal 9)" in line
    assert status_of(run_dir) == "failed"
    pid = json.loads((run_dir / "run.json").read_text())["provenance"]["lanes"]["default"]["runtime"]["pid"]
    assert not psutil.pid_exists(pid)
    schedule = [json.loads(ln) for ln in log.read_text().splitlines()]
    kept, completed = kept_vs_completed(run_dir, schedule)
    # warmups 1-2, measured 3-4, and #5 too when it ended before #6 arrived (a busy host can delay #4,
    # which #6 follows); the death at #6 leaves nothing after it served
    assert completed in (4, 5), completed
    analyzable(run_dir)
    table_row("SIGKILL mid-level (native)", "stand-in llama-server, die_at_completion=6", code, line,
              "failed", kept, completed)


def test_killed_by_the_last_requests_of_the_run(fake_server, tmp_path, capsys):
    # completions 1-2 warmups, 3-10 measured; dies at #9: too few requests are left for the
    # "N + 3 in a row" rule, yet the run must not end "complete" against a dead server
    fake = fake_server(n_slots=2, decode_iteration_ms=5.0, die_at_completion=9)
    run_dir = tmp_path / "run"
    code = main(small_sweep(fake.base_url, run_dir, requests=8))
    line = one_error_line(capsys.readouterr().err)
    assert code == 4
    assert line.startswith("satbench: error: lane default: level 2 (repetition 1) failed: the server stopped "
                           "answering"), line
    assert status_of(run_dir) == "failed"
    kept, completed = kept_vs_completed(run_dir, fake.stop())
    # #8 is in flight when #9 arrives, unless a busy host delayed #9's send until #8 had ended too
    assert completed in (7, 8), completed
    analyzable(run_dir)
    table_row("SIGKILL by the run's last requests", "fake die_at_completion=9 of 10", code, line, "failed",
              kept, completed)
