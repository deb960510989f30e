"""A whole level from hand-made records: Little's law, flags, and what is unavailable."""

import pytest

from satbench.metrics.level import summarize_level
from satbench.metrics.level_result import LevelContext
from tests.builders import ev, mark, metrics, slots


def ctx(**kw):
    base = dict(lane="default", level=1, repetitions_planned=1, measured_requests_planned=32,
                slots=1, per_slot_ctx=256, prompt_tokens=16, output_tokens=3, overhead_ms=0.0,
                llamacpp=True)
    base.update(kw)
    return LevelContext(**base)


def closed_loop_n1(n_requests: int = 5, gap_ms: float = 0.0):
    """One stream, 100 ms per request (TTFT 40, then 2 tokens 30 ms apart), `gap_ms` between them."""
    events = [ev(phase="warmup", sent_ms=0, chunks_ms=[40, 70, 100])]
    for i in range(n_requests):
        t0 = (100 + gap_ms) * (i + 1)
        events.append(ev(seq=i, sent_ms=t0, targeted_ms=t0, chunks_ms=[t0 + 40, t0 + 70, t0 + 100],
                         prompt_ms=30.0, prompt_n=16))
    return events


def test_level_metrics_exact_on_a_scripted_closed_loop():
    events = closed_loop_n1()
    marks = [mark("level_start", 0), mark("level_end", 600)]
    samples = [slots(t, [0], n=1) for t in range(0, 700, 100)]
    samples += [metrics(150, n_busy_slots_per_decode=1.0, n_decode_total=10),
                metrics(550, n_busy_slots_per_decode=1.0, n_decode_total=22)]
    r = summarize_level(ctx(), events, marks, samples)
    # window: first measured token 140 → first completion after the last issue (500) = 600
    rep = r.repetitions[0]
    assert rep.window_s == pytest.approx(0.460)
    assert r.latency.ttft_ms.p50 == pytest.approx(40.0)
    assert r.latency.itl_ms.p50 == pytest.approx(30.0)
    assert r.latency.tpot_ms.p50 == pytest.approx(30.0)
    assert r.latency.e2e_ms.mean == pytest.approx(100.0)
    assert r.latency.queue_time_ms.p50 == pytest.approx(10.0)  # 40 - 30 - 0
    assert r.occupancy.time_weighted_busy_slots == pytest.approx(1.0)
    assert r.occupancy.decode_weighted_busy_slots == pytest.approx(1.0)
    # requests ending in [140, 600] at 200..600, sent from 100: 5 whole requests in 0.5 s → 10 req/s,
    # what this server completes (5 requests ÷ the 0.46 s window said 10.9)
    assert r.throughput.req_per_s.value == pytest.approx(10.0)
    assert r.throughput.output_tok_per_s.value == pytest.approx(30.0) and rep.throughput_streams == 1
    # back to back: the stream is always in the system → N_little = 1 exactly
    assert r.littles_law.n_from_little == pytest.approx(1.0)
    assert r.littles_law.within_tolerance and not any("littles_law" in f for f in r.flags)


def test_littles_law_mismatch_is_flagged_when_streams_idle_between_requests():
    events = closed_loop_n1(n_requests=8, gap_ms=20.0)  # 20 ms of client lag per 120 ms cycle
    r = summarize_level(ctx(), events, [mark("level_start", 0), mark("level_end", 1000)], [])
    # req/s: 8 requests from the first one's send (120) to the window's end (1060), 7 gaps inside;
    # × the 100 ms E2E → 0.85 of the one stream in flight
    assert r.littles_law.n_from_little == pytest.approx(8 / 0.94 * 0.1)
    assert any(f.startswith("littles_law_mismatch") for f in r.flags)
    assert r.littles_law.within_tolerance is False


def test_flags_for_queue_bound_few_requests_errors_and_retries():
    events = closed_loop_n1()
    events.append(ev(seq=9, sent_ms=550, chunks_ms=[560], error="timeout", retries=1))
    r = summarize_level(ctx(level=2, slots=1, per_slot_ctx=10, measured_requests_planned=5),
                        events, [mark("level_start", 0, level=2)], [])
    text = " | ".join(r.flags)
    assert "queue_bound: 2 streams but 1 slots" in text
    assert "per-slot context 10 < prompt+output 19" in text
    assert "few_requests" in text
    assert "errors: timeout×1" in text
    assert "retries" in text
    assert "repetition_incomplete" in text
    assert r.counts.errors_by_type == {"timeout": 1}


def test_llamacpp_only_figures_are_unavailable_not_zero_on_other_servers():
    r = summarize_level(ctx(llamacpp=False, slots=None), closed_loop_n1(), [], [])
    assert r.occupancy.time_weighted_busy_slots is None
    assert r.occupancy.decode_weighted_busy_slots is None
    assert "not a llama.cpp server" in r.unavailable["decode_weighted_busy_slots"]
    assert "no GPU" in r.unavailable["peak_gpu_mem_bytes"]


def test_littles_law_reads_the_published_rate():
    """The check multiplies the rate the level reports by the mean E2E: a rate that does not
    describe the server (here, twice the truth) is flagged, which a check computing its own rate
    from completions could not see."""
    from satbench.metrics.little import littles_law

    busy = [ev(stream=s, seq=10 * s + i, sent_ms=100 * i, chunks_ms=[100 * i + 50, 100 * i + 100])
            for s in range(4) for i in range(5)]  # 4 streams, back-to-back 100 ms requests: 40 req/s
    assert littles_law(4, [(40.0, busy)]).n_from_little == pytest.approx(4.0)
    wrong = littles_law(4, [(80.0, busy)])
    assert wrong.n_from_little == pytest.approx(8.0) and not wrong.within_tolerance
    assert littles_law(4, [(None, busy), (40.0, [])]) is None


def test_failed_requests_count_against_slo_attainment_but_not_goodput():
    """Five requests fit the SLO; two more, ending inside the window, failed: attainment is 5/7,
    not 5/5, while goodput stays the rate of requests that met the SLO."""
    from satbench.config.schema import SloConfig

    events = closed_loop_n1(n_requests=5)
    events += [ev(seq=10 + i, sent_ms=t, chunks_ms=[t + 40], end_ms=t + 50, error="timeout")
               for i, t in enumerate((420, 450))]
    slo = SloConfig(p95_ttft_ms=100.0, p95_tpot_ms=100.0)
    r = summarize_level(ctx(slo=slo), events, [mark("level_start", 0), mark("level_end", 600)], [])
    assert r.counts.requests_in_window == 5
    assert r.slo_attainment == pytest.approx(5 / 7)
    assert r.goodput_req_per_s == pytest.approx(r.throughput.req_per_s.value)
    tight = summarize_level(ctx(slo=SloConfig(p95_ttft_ms=100.0, p95_tpot_ms=20.0)), events,
                            [mark("level_start", 0), mark("level_end", 600)], [])
    assert tight.slo_attainment == 0.0 and tight.goodput_req_per_s == 0.0  # TPOT 30 ms > 20


def test_an_e2e_target_counts_in_attainment_when_the_slo_sets_one():
    from satbench.config.schema import SloConfig

    events = closed_loop_n1(n_requests=5)  # E2E 100 ms each
    marks = [mark("level_start", 0), mark("level_end", 600)]
    loose = summarize_level(ctx(slo=SloConfig(p95_ttft_ms=100.0, p95_tpot_ms=100.0, p95_e2e_ms=150.0)),
                            events, marks, [])
    tight = summarize_level(ctx(slo=SloConfig(p95_ttft_ms=100.0, p95_tpot_ms=100.0, p95_e2e_ms=90.0)),
                            events, marks, [])
    assert loose.slo_attainment == 1.0 and tight.slo_attainment == 0.0


def test_a_level_measured_once_gets_its_batch_means_ci_only_where_the_lane_asks():
    events = closed_loop_n1(n_requests=9)
    marks = [mark("level_start", 0), mark("level_end", 1000)]
    off = summarize_level(ctx(), events, marks, []).throughput.output_tok_per_s
    assert off.ci_low is None and off.ci_method == "none (one value)"
    on = summarize_level(ctx(one_repetition_ci=True), events, marks, []).throughput.output_tok_per_s
    assert on.value == off.value == pytest.approx(30.0)
    assert on.ci_method == "batch means of one repetition (8 spans), at least ±10%"
    # window [140, 1000] ms in 8 spans of 107.5 ms hold 4, 3, 3, 3, 4, 3, 3, 4 tokens: sd 0.5175 of
    # mean 3.375 tokens, t(7) = 2.3646 → ±12.82 %, wider than the ±10 % floor
    assert on.ci_low == pytest.approx(26.153938, rel=1e-6)
    assert on.ci_high == pytest.approx(33.846062, rel=1e-6)
    # the request rate keeps its one value
    assert summarize_level(ctx(one_repetition_ci=True), events, marks, []).throughput.req_per_s.ci_low is None
