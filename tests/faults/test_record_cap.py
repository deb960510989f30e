"""A run stops at the records its analysis holds: events.jsonl never holds more than MAX_EVENTS lines
(nor server_samples.jsonl more than MAX_SAMPLES), whatever the load shape; the record that would
pass the cap stops the run as a failed write does (one line, exit 5, run.json `failed` with it), and
what was written stays analyzable."""

from __future__ import annotations

import json

import pytest

from satbench.cli.main import main
from satbench.records.events import LevelMark, RequestEvent, read_events
from satbench.records.writer import JsonlWriter, RecordCapError, count_lines
from satbench.run import sweep as sweep_module
from tests.fakes.fairness_harness import FAIR
from tests.faults.common import analyzable, one_error_line, small_sweep, status_of
from tests.faults.test_write_failure_scenarios import shape_argv

CAP = 30


def _mark(kind: str = "level_start") -> LevelMark:
    return LevelMark(kind=kind, lane="a", scenario="solo", level=1, repetition=1, t_ns=1, n_requests=1)


def test_the_writer_keeps_its_reserve_for_marks_and_counts_what_the_file_held(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text('{"old": 1}\n{"old": 2}\n')  # a resumed run's lines count toward the cap
    assert count_lines(path) == 2
    writer = JsonlWriter(path, 6, reserve=2, reserved=lambda r: isinstance(r, LevelMark))
    writer.write(_mark())
    writer.write(_mark())  # 4 lines: the reserve's edge
    with pytest.raises(RecordCapError, match="holds 4 records, the most satbench analyzes in one run"):
        writer.write(_sample_request())
    writer.write(_mark("level_end"))
    writer.write(_mark("level_end"))
    with pytest.raises(RecordCapError):
        writer.write(_mark("level_end"))  # past the cap: not even a mark
    writer.close()
    assert count_lines(path) == 6
    with pytest.raises(ValueError):
        JsonlWriter(tmp_path / "x.jsonl", 2, reserve=2)


def _sample_request() -> RequestEvent:
    return RequestEvent(lane="a", scenario="solo", level=1, repetition=1, stream=0, seq=0, phase="measured",
                        request_id="r", prompt_tokens=1, max_tokens=1, targeted_ns=1, sent_ns=1, end_ns=2)


SHAPES = ["closed loop", "open loop", "fairness", "together"]


@pytest.mark.parametrize("shape", SHAPES)
def test_every_load_shape_stops_at_the_cap_and_stays_analyzable(shape, fake_server, tmp_path, capsys,
                                                                  monkeypatch):
    monkeypatch.setattr(sweep_module, "MAX_EVENTS", CAP)
    fake = fake_server(**FAIR) if shape == "fairness" else fake_server(n_slots=4, decode_iteration_ms=2.0)
    run_dir = tmp_path / "run"
    argv = shape_argv(shape, fake.base_url, run_dir, tmp_path, requests=16, checks="F1,S2")
    code = main(argv)
    err = capsys.readouterr().err
    assert "never retrieved" not in err and "Traceback" not in err, err[-3000:]
    line = one_error_line(err)
    assert code == 5, line
    assert f"events.jsonl holds {CAP - 2 * (2 if shape == 'together' else 1)} records, the most" in line, line
    assert status_of(run_dir) == "failed"
    assert "the most satbench analyzes in one run" in json.loads((run_dir / "run.json").read_text())[
        "status_reason"]
    assert count_lines(run_dir / "events.jsonl") <= CAP
    records = read_events(run_dir, cap=CAP)
    ends = [r for r in records if isinstance(r, LevelMark) and r.kind == "level_end"]
    starts = [r for r in records if isinstance(r, LevelMark) and r.kind == "level_start"]
    assert len(ends) == len(starts)  # every level started has its end mark: none reads as torn
    if shape != "fairness":  # (the fairness checks were cut in S2, which sends without level marks)
        assert ends[-1].status == "failed" and "the most satbench analyzes" in (ends[-1].reason or "")
    analyzable(run_dir)


def test_the_samples_file_stops_the_run_at_its_cap(fake_server, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sweep_module, "MAX_SAMPLES", 12)
    fake = fake_server(n_slots=4, decode_iteration_ms=2.0)
    run_dir = tmp_path / "run"
    code = main(small_sweep(fake.base_url, run_dir, levels="1,2", requests=16, output=4))
    err = capsys.readouterr().err
    assert "never retrieved" not in err and "Traceback" not in err, err[-3000:]
    line = one_error_line(err)
    assert code == 5 and "server_samples.jsonl holds 12 records, the most" in line, line
    assert status_of(run_dir) == "failed" and count_lines(run_dir / "server_samples.jsonl") == 12
    analyzable(run_dir)
