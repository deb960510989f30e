"""Throughput per stream from the start of a whole request to the window's end: exact on scripted
closed loops in step or out of step (where the window's length is biased), and held down by a
stream stalled at either end of the window."""

import pytest

from satbench.metrics import throughput
from satbench.metrics.window import SteadyWindow, steady_window
from tests.builders import MS, ev

W = SteadyWindow(start_ns=100 * MS, end_ns=1100 * MS)  # one second


def test_output_tokens_inside_window_only():
    events = [
        ev(seq=0, sent_ms=0, chunks_ms=[50, 150, 250, 1050, 1150]),  # 3 in window
        ev(seq=1, sent_ms=0, chunks_ms=[500, 600], tokens_per_chunk=2),  # 4 in window
        ev(seq=2, phase="warmup", sent_ms=0, chunks_ms=[200, 300]),  # warmup: never counted
    ]
    assert throughput.output_tokens_in_window(events, W) == 7


def lockstep(n_streams: int, per_stream: int, prefill_ms: float = 60.0, tokens: int = 4, itl_ms: float = 10.0,
             warmup: bool = True):
    """N equal streams in step, as a batching server keeps equal requests: every request prefills
    `prefill_ms`, then delivers `tokens` tokens `itl_ms` apart; the next is sent as it ends."""
    cycle_ms = prefill_ms + (tokens - 1) * itl_ms
    events, seq = [], 0
    rounds = [("warmup", 1)] if warmup else []
    rounds += [("measured", per_stream)]
    t0 = 0.0
    for phase, count in rounds:
        for _ in range(count):
            for s in range(n_streams):
                chunks = [t0 + prefill_ms + i * itl_ms for i in range(tokens)]
                events.append(ev(stream=s, seq=seq, sent_ms=t0, targeted_ms=t0, chunks_ms=chunks, phase=phase,
                                 prompt_n=32, prompt_ms=prefill_ms))
                seq += 1
            t0 += cycle_ms
    return events, cycle_ms


@pytest.mark.parametrize("n,per_stream", [(1, 32), (4, 8), (8, 2), (8, 8)])
def test_streams_in_step_give_the_rate_the_server_sustains(n, per_stream):
    """The sustained rate is N requests per cycle. Window length (first token → first completion
    after the last issue) holds one prefill fewer than the requests whose tokens it holds: all
    tokens ÷ window gave 8·4·2/(2·90 − 60) = 0.533 tok/ms at N=8 with two requests per stream,
    +33 % over the true 0.356."""
    events, cycle_ms = lockstep(n, per_stream)
    win, _ = steady_window(events, n)
    sustained_tok_per_s = n * 4 / (cycle_ms / 1000)
    assert throughput.output_tok_per_s(events, win, n) == pytest.approx(sustained_tok_per_s)
    assert throughput.req_per_s(events, win, n) == pytest.approx(n / (cycle_ms / 1000))
    assert throughput.total_tok_per_s(events, win, n) == pytest.approx(n * (32 + 4) / (cycle_ms / 1000))
    all_in_window = throughput.output_tokens_in_window(events, win) / win.duration_s
    if per_stream == 2:  # the old figure, kept here as the reason for the change
        assert all_in_window > 1.3 * sustained_tok_per_s


def back_to_back(stream: int, start_ms: float, count: int, life_ms: float = 200.0, tokens: int = 5):
    """`count` requests of one stream, each sent as the previous ends, tokens evenly over its life."""
    return [ev(stream=stream, seq=100 * stream + i, sent_ms=start_ms + i * life_ms,
               chunks_ms=[start_ms + i * life_ms + life_ms * (k + 1) / tokens for k in range(tokens)])
            for i in range(count)]


def test_a_stream_whose_requests_all_ended_before_the_window_is_left_out_and_the_rest_scaled():
    events = back_to_back(0, 100, 5)  # 100 .. 1100: 25 tokens in the window's 1 s
    events.append(ev(stream=1, seq=9, sent_ms=0, chunks_ms=[30, 60]))  # over before the window opened
    assert throughput.throughput_streams(events, W) == 1
    assert throughput.output_tok_per_s(events, W, 2) == pytest.approx(2 * 25 / 1.0)
    assert throughput.req_per_s(events, W, 2) == pytest.approx(2 * 5 / 1.0)


def test_a_request_stalled_at_the_windows_end_holds_its_stream_down():
    """Stream 1 completes one request, then its next delivers 2 of 5 tokens and stalls until 5 s
    (it succeeds then): by the window's end 800 of its 4,700 ms had passed, so it counts 0.17 of
    a request. Counting only requests that end in the window gave stream 1 the rate of its one good
    request (25 tok/s, 50 in all)."""
    events = back_to_back(0, 100, 5)
    events += back_to_back(1, 100, 1)
    events.append(ev(stream=1, seq=150, sent_ms=300, chunks_ms=[340, 380, 5000, 5000, 5000]))
    share = 800 / 4700
    assert throughput.output_tok_per_s(events, W, 2) == pytest.approx(25 + 5 + 5 * share)
    assert throughput.req_per_s(events, W, 2) == pytest.approx(5 + 1 + share)


def test_a_stream_stalled_since_before_the_window_counts_as_the_time_it_took():
    """Stream 1's request was sent at 0 and got one token before stalling until 5 s: it is in the
    figure (1,100 of its 5,000 ms by the window's end: 0.22 of its 5 tokens in 1.1 s), not left
    out and replaced by stream 0's rate."""
    events = back_to_back(0, 100, 5)
    events.append(ev(stream=1, seq=150, sent_ms=0, chunks_ms=[50] + [5000] * 4))
    assert throughput.throughput_streams(events, W) == 2
    assert throughput.output_tok_per_s(events, W, 2) == pytest.approx(25 + 5 * 0.22 / 1.1)


def test_streams_out_of_step_give_the_rate_the_server_sustains():
    """A reviewer's schedule: N=8, every request 100 ms with its first token at 60 ms, seven streams
    50 ms behind the first. At the window's end those seven are half-way through a request, still
    prefilling: crediting it by the tokens delivered by then read 75.3 req/s for 80."""
    events = []
    for s in range(8):
        t0 = 0 if s == 0 else 50
        events.append(ev(stream=s, seq=1000 + s, sent_ms=t0, chunks_ms=[t0 + 60 + 5 * k for k in range(8)],
                         phase="warmup"))
        for i in range(8):
            t = t0 + 100 * (i + 1)
            events.append(ev(stream=s, seq=10 * s + i, sent_ms=t, targeted_ms=t,
                             chunks_ms=[t + 60 + 40 * k / 7 for k in range(8)]))
    win, _ = steady_window(events, 8)
    assert (win.start_ns, win.end_ns) == (210 * MS, 900 * MS)
    assert throughput.req_per_s(events, win, 8) == pytest.approx(80.0)
    assert throughput.output_tok_per_s(events, win, 8) == pytest.approx(640.0)


def test_failed_requests_take_their_time_and_count_their_tokens_but_not_as_requests():
    events = [
        ev(seq=0, sent_ms=100, chunks_ms=[150, 200]),                              # ends 200
        ev(seq=1, sent_ms=200, chunks_ms=[250, 300], error="wrong_token_count"),  # ends 300, failed
        ev(seq=2, sent_ms=300, chunks_ms=[350, 400]),                              # ends 400
        ev(seq=3, sent_ms=400, chunks_ms=[450], error="cancelled"),                # satbench stopped it
    ]
    w = SteadyWindow(start_ns=100 * MS, end_ns=450 * MS)
    assert throughput.output_tok_per_s(events, w, 1) == pytest.approx(7 / 0.35)
    assert throughput.req_per_s(events, w, 1) == pytest.approx(2 / 0.35)


def test_a_request_running_at_the_windows_end_counts_by_the_share_of_its_life_elapsed():
    w = SteadyWindow(start_ns=100 * MS, end_ns=500 * MS)
    events = [ev(seq=0, sent_ms=100, chunks_ms=[200, 300], prompt_n=64, prompt_ms=90.0),
              ev(seq=1, sent_ms=300, chunks_ms=[600, 700], prompt_n=64, prompt_ms=290.0)]  # half-way at 500
    assert throughput.total_tok_per_s(events, w, 1) == pytest.approx((64 + 2) * 1.5 / 0.4)
    assert throughput.req_per_s(events, w, 1) == pytest.approx(1.5 / 0.4)


def test_no_stream_running_in_the_window_gives_no_rate():
    events = [ev(seq=0, sent_ms=0, chunks_ms=[50, 60]), ev(stream=1, seq=1, sent_ms=1200, chunks_ms=[1300])]
    assert throughput.output_tok_per_s(events, W, 2) is None


def test_prompt_tokens_as_the_server_counted_them():
    counted = ev(seq=0, sent_ms=0, chunks_ms=[50], prompt_n=100, prompt_ms=40.0)
    asked = ev(seq=1, sent_ms=0, chunks_ms=[50])
    usage = asked.model_copy(update={"server_prompt_tokens": 48})  # a server with no timings but usage
    assert throughput.prompt_tokens_of(counted) == 100
    assert throughput.prompt_tokens_of(usage) == 48
    assert throughput.prompt_tokens_of(asked) == asked.prompt_tokens


def test_batch_rates_cut_the_window_into_equal_spans():
    # 1 s window in 8 spans of 125 ms: tokens at 100 (span 0, on the start), 300 (span 1), 1100 (the
    # end: the last span), and a chunk of 3 tokens at 700 (span 4); warmup chunks never count
    events = [ev(seq=0, sent_ms=0, chunks_ms=[100, 300, 1100]),
              ev(seq=1, sent_ms=0, chunks_ms=[700], tokens_per_chunk=3),
              ev(seq=2, phase="warmup", sent_ms=0, chunks_ms=[500])]
    assert throughput.batch_rates(events, W) == [8.0, 8.0, 0.0, 0.0, 24.0, 0.0, 0.0, 8.0]
    assert throughput.batch_rates(events, SteadyWindow(start_ns=W.start_ns, end_ns=W.start_ns)) == []


def test_one_repetition_half_width_is_the_batch_means_ci_at_least_the_floor():
    # steady batches: the floor (±10 %) holds
    assert throughput.one_repetition_half_width(200.0, [100.0] * 8) == pytest.approx(20.0)
    # noisy batches, sd 40 on mean 100: t(7, 0.975) = 2.3646 → ±2.3646 · 40 ÷ √8 ÷ 100 = ±33.4 %
    noisy = [60.0, 140.0] * 4
    sd = 42.76179
    assert throughput.one_repetition_half_width(100.0, noisy) == pytest.approx(2.364624 * sd / 8 ** 0.5,
                                                                              rel=1e-5)
    assert throughput.one_repetition_half_width(100.0, [5.0]) is None
    assert throughput.one_repetition_half_width(100.0, [0.0, 0.0]) is None
