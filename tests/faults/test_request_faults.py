"""Faults of single requests (HTTP 4xx/5xx, a dropped connection, a broken or short stream) are data:
each faulted request is an error record of the right type, every other request is kept, the run
completes (exit 0) and the level's flags count the errors."""

from __future__ import annotations

import pytest

from satbench.cli.main import main
from tests.faults.common import analyzable, kept_vs_completed, requests, small_sweep, status_of, table_row

EXPECTED = {  # fake's completion_fault → the error type satbench records
    "http_500": "http_500",
    "http_503": "http_503",
    "http_400_ctx": "http_400",
    "drop": "stream_broken",
    "bad_chunk": "malformed_stream",
    "invalid_json": "malformed_stream",
    "malformed_sse": "malformed_stream",
    "error_event": "server_error_event",
    "wrong_token_count": "wrong_token_count",
    "no_final_event": "truncated_stream",
}


@pytest.mark.parametrize("fault", list(EXPECTED))
def test_request_fault_is_recorded_as_data(fault, fake_server, tmp_path, capsys):
    # 10 completions (2 warmups + 8 measured); every third one is faulted: #3, #6, #9
    fake = fake_server(n_slots=2, decode_iteration_ms=3.0, completion_fault=fault, fault_every=3,
                       fault_after_tokens=2)
    run_dir = tmp_path / "run"
    code = main(small_sweep(fake.base_url, run_dir, output=6))
    err = capsys.readouterr().err
    assert code == 0 and "satbench: error" not in err and "Traceback" not in err
    assert status_of(run_dir) == "complete"
    schedule = fake.stop()
    statuses = (f"fault_{fault}", f"http_{EXPECTED[fault][5:]}")
    faulted = {r["id"]: r for r in schedule if r["status"] in statuses}
    assert len(faulted) == 3
    events = {e.request_id: e for e in requests(run_dir)}
    assert len(events) == 10 and set(events) == {r["id"] for r in schedule}
    for rid in faulted:
        e = events[rid]
        assert e.error is not None and e.error.type == EXPECTED[fault], (rid, e.error)
        assert e.phase == "measured" and e.retries == 0
    if fault.startswith("http_"):
        assert all(events[rid].http_status == int(fault[5:8]) for rid in faulted)
    if fault == "http_400_ctx":
        assert all("exceeds the available context size" in events[rid].error.message for rid in faulted)
    if fault in ("drop", "bad_chunk", "invalid_json", "malformed_sse", "error_event"):
        # the tokens before the fault
        assert all(sum(n for _, n in events[rid].chunks) == 2 for rid in faulted)
    kept, completed = kept_vs_completed(run_dir, schedule)
    assert kept == completed == 7
    level = analyzable(run_dir)["lanes"][0]["levels"][0]
    assert level["counts"]["errors_by_type"] == {EXPECTED[fault]: 3}
    assert level["counts"]["requests_ok"] == 5
    assert f"errors: {EXPECTED[fault]}×3" in level["flags"]
    table_row(f"request fault {fault}", f"fake completion_fault={fault}, fault_every=3", code, "(none)",
              "complete", kept, completed)


def test_a_level_where_every_measured_request_fails_stops_the_run_naming_the_error(fake_server, tmp_path,
                                                                                   capsys):
    """A server that refuses every request (here HTTP 400, context exceeded) is not a result: the
    level fails with the error counts and the server's own message, instead of a 'complete' run
    with nothing to recommend."""
    fake = fake_server(n_slots=2, decode_iteration_ms=3.0, completion_fault="http_400_ctx", fault_every=1)
    run_dir = tmp_path / "run"
    code = main(small_sweep(fake.base_url, run_dir, output=6))
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 4
    assert line.startswith("satbench: error: lane default: level "), line
    assert "failed: every measured request failed (http_400 ×" in line, line
    assert "exceeds the available context size" in line, line
    assert status_of(run_dir) == "failed"
    assert all(e.error is not None for e in requests(run_dir))  # each refusal is on disk as data
