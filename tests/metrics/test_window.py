"""The steady window follows DESIGN.md §2 exactly."""

from satbench.metrics.window import steady_window
from tests.builders import MS, ev


def two_stream_level():
    # stream 0: warmup 0-100, measured a 100-200 (first token 120), c 200-300
    # stream 1: warmup 0-150, measured b 150-260 (first token 170), d 260-400 (issued last)
    return [
        ev(stream=0, seq=0, phase="warmup", sent_ms=0, chunks_ms=[10, 100]),
        ev(stream=1, seq=1, phase="warmup", sent_ms=0, chunks_ms=[20, 150]),
        ev(stream=0, seq=0, sent_ms=100, chunks_ms=[120, 200], targeted_ms=100),
        ev(stream=1, seq=1, sent_ms=150, chunks_ms=[170, 260], targeted_ms=150),
        ev(stream=0, seq=2, sent_ms=200, chunks_ms=[220, 300], targeted_ms=200),
        ev(stream=1, seq=3, sent_ms=260, chunks_ms=[280, 400], targeted_ms=260),
    ]


def test_window_start_is_when_the_last_stream_gets_its_first_measured_token():
    w, why = steady_window(two_stream_level(), 2)
    assert why is None
    assert w.start_ns == 170 * MS


def test_window_end_is_the_first_completion_after_the_last_issue():
    w, _ = steady_window(two_stream_level(), 2)
    # last issue at 260 ms; completions after it: 300 (stream 0) and 400 → end at 300
    assert w.end_ns == 300 * MS
    assert w.duration_s == 0.130


def test_no_window_when_a_stream_never_got_a_measured_token():
    events = [e for e in two_stream_level() if not (e.stream == 1 and e.phase == "measured")]
    w, why = steady_window(events, 2)
    assert w is None and "every stream" in why


def test_no_window_when_requests_end_before_all_streams_are_busy():
    events = [
        ev(stream=0, seq=0, sent_ms=0, chunks_ms=[10, 20], targeted_ms=0),
        ev(stream=1, seq=1, sent_ms=0, chunks_ms=[50, 60], targeted_ms=0),
    ]
    w, why = steady_window(events, 2)
    assert w is None and "too few" in why
