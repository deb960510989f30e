"""Throughput counts only what falls inside the steady window."""

import pytest

from satbench.metrics import throughput
from satbench.metrics.window import SteadyWindow
from tests.builders import MS, ev


W = SteadyWindow(start_ns=100 * MS, end_ns=1100 * MS)  # one second


def test_output_tokens_inside_window_only():
    events = [
        ev(seq=0, sent_ms=0, chunks_ms=[50, 150, 250, 1050, 1150]),  # 3 in window
        ev(seq=1, sent_ms=0, chunks_ms=[500, 600], tokens_per_chunk=2),  # 4 in window
        ev(seq=2, phase="warmup", sent_ms=0, chunks_ms=[200, 300]),  # warmup: never counted
    ]
    assert throughput.output_tokens_in_window(events, W) == 7
    assert throughput.output_tok_per_s(events, W) == pytest.approx(7.0)


def test_requests_counted_by_completion_and_only_when_ok():
    events = [
        ev(seq=0, sent_ms=0, chunks_ms=[50, 200]),
        ev(seq=1, sent_ms=0, chunks_ms=[60, 1200]),  # completes after the window
        ev(seq=2, sent_ms=300, chunks_ms=[400, 900], error="wrong_token_count"),
        ev(seq=3, sent_ms=300, chunks_ms=[400, 1000]),
    ]
    assert [e.seq for e in throughput.completed_in_window(events, W)] == [0, 3]
    assert throughput.req_per_s(events, W) == pytest.approx(2.0)


def test_total_tokens_add_prompt_tokens_prefilled_inside_the_window():
    events = [
        ev(seq=0, sent_ms=0, chunks_ms=[50, 150], prompt_n=100, prompt_ms=40.0),  # first token before window
        ev(seq=1, sent_ms=100, chunks_ms=[300, 400], prompt_n=64, prompt_ms=40.0),  # prefill in window
    ]
    assert throughput.prompt_tokens_in_window(events, W) == 64
    assert throughput.total_tok_per_s(events, W) == pytest.approx(64 + 3)
