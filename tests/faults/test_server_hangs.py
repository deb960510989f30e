"""A server that accepts connections and then says nothing: per-request timeouts fire, the level is
marked failed, nothing hangs, and what completed before is kept."""

from __future__ import annotations

from satbench.cli.main import main
from satbench.records.events import LevelMark, read_events
from tests.faults.common import (
    analyzable,
    kept_vs_completed,
    one_error_line,
    requests,
    small_sweep,
    status_of,
    table_row,
)


def test_server_stops_answering(fake_server, tmp_path, capsys):
    # completions 1-2: level 2's warmups, 3-6 measured and answered, from 7 on: read and never answered
    fake = fake_server(n_slots=2, decode_iteration_ms=5.0, hang_from_completion=7)
    run_dir = tmp_path / "run"
    code = main(small_sweep(fake.base_url, run_dir, requests=10, extra=("--request-timeout", "1")))
    line = one_error_line(capsys.readouterr().err)
    assert code == 4
    assert ("level 2 (repetition 1) failed: 5 requests in a row could not reach the server or got no answer"
            in line)
    assert "timeout: request took longer than 1 s" in line
    assert status_of(run_dir) == "failed"
    end = next(m for m in read_events(run_dir) if isinstance(m, LevelMark) and m.kind == "level_end")
    assert end.status == "failed"
    schedule = fake.stop()
    kept, completed = kept_vs_completed(run_dir, schedule)
    assert completed == 6
    timed_out = [e for e in requests(run_dir) if not e.ok]
    # 5 in a row + the one in flight
    assert len(timed_out) == 6 and {e.error.type for e in timed_out} == {"timeout"}
    # each was given up after its timeout (1 s, checked every 0.25 s), not before, not much later
    assert all(1.0 <= (e.end_ns - e.sent_ns) / 1e9 < 2.0 for e in timed_out)
    assert {r["id"] for r in schedule if r["status"] == "hung"} == {e.request_id for e in timed_out}
    analyzable(run_dir)
    table_row("server stops answering", "fake hang_from_completion=7, --request-timeout 1", code, line,
              "failed", kept, completed)
