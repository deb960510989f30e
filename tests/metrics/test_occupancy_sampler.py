"""Occupancy figures that must not be made up: a stale /slots reading stretched over a later window
(D1), a window too sparsely sampled to resolve (D2), a decode-weighted figure bent by /metrics'
6-digit printing (D6)."""

import pytest

from satbench.http.promparse import llamacpp_values
from satbench.metrics import occupancy
from satbench.metrics.level import summarize_level
from satbench.metrics.window import SteadyWindow
from tests.builders import MS, ev, mark, metrics, slots
from tests.metrics.test_level import closed_loop_n1, ctx

W = SteadyWindow(start_ns=0, end_ns=1000 * MS)


def failed_slots(t_ms: float):
    return slots(t_ms, []).model_copy(update={"error": "ParseError: /slots answered HTTP 503"})


def failed_metrics(t_ms: float, error: str = "ParseError: /metrics answered HTTP 501"):
    return metrics(t_ms).model_copy(update={"error": error})


# ------------------------------------------------------------------------------- D1: stale readings

def test_a_reading_before_a_run_of_failed_polls_is_not_stretched_over_the_window():
    idle = [slots(t, []) for t in range(-3000, -2000, 100)]           # good, idle, seconds before
    failing = [failed_slots(t) for t in range(-2000, 1001, 100)]      # then /slots answers 503
    assert occupancy.time_weighted_busy_slots(idle + failing, W) is None


def test_a_poller_that_stopped_leaves_no_reading_for_later_windows():
    idle = [slots(t, []) for t in range(-5000, -3000, 100)]
    stopped = [failed_slots(t) for t in range(-3000, -1000, 100)]     # 20 failures, then no more polls
    assert occupancy.time_weighted_busy_slots(idle + stopped, W) is None


def test_a_reading_from_long_before_the_window_does_not_count_for_its_start():
    early = [slots(t, [0, 1, 2, 3]) for t in range(-1000, -499, 100)]  # 4 busy, last 500 ms before the window
    inside = [slots(t, [0]) for t in range(500, 1001, 100)]            # 1 busy once polls resume
    # polled every 100 ms: a 500 ms old reading is no reading; the mean is over [500, 1000] only
    assert occupancy.time_weighted_busy_slots(early + inside, W) == pytest.approx(1.0)


def test_a_recent_reading_before_the_window_still_counts():
    samples = [slots(t, [0, 1]) for t in range(-300, 1, 100)] + [slots(t, [0]) for t in range(500, 1001, 100)]
    # the 0 ms reading (2 busy) holds until 500 ms, then 1 busy: mean 1.5
    assert occupancy.time_weighted_busy_slots(samples, W) == pytest.approx(1.5)


def test_level_falls_back_to_requests_processing_when_slots_went_stale():
    events = closed_loop_n1(n_requests=5)
    marks = [mark("level_start", 0), mark("level_end", 600)]
    samples = [slots(t, [], n=1) for t in range(-3000, -2000, 100)]
    samples += [failed_slots(t) for t in range(-2000, 700, 50)]
    samples += [metrics(t, requests_processing=1.0) for t in range(100, 700, 20)]
    r = summarize_level(ctx(), events, marks, samples)
    assert r.occupancy.time_weighted_busy_slots == pytest.approx(1.0)
    assert r.occupancy.time_weighted_source == "requests_processing"


def test_level_says_why_when_every_source_is_stale():
    events = closed_loop_n1(n_requests=5)
    marks = [mark("level_start", 0), mark("level_end", 600)]
    samples = [slots(t, [], n=1) for t in range(-3000, -2000, 100)]
    samples += [failed_slots(t) for t in range(-2000, 700, 50)]
    r = summarize_level(ctx(), events, marks, samples)
    assert r.occupancy.time_weighted_busy_slots is None
    assert "HTTP 503" in r.unavailable["time_weighted_busy_slots"]


# ---------------------------------------------------------------------------- D2: sparse sampling

def test_a_window_with_few_slots_samples_is_flagged():
    events = closed_loop_n1()  # window [140, 600] ms
    marks = [mark("level_start", 0), mark("level_end", 600)]
    samples = [slots(t, [0], n=1) for t in range(0, 700, 100)]  # 5 readings inside the window
    r = summarize_level(ctx(), events, marks, samples)
    flag = next(f for f in r.flags if f.startswith("few_occupancy_samples"))
    assert "r1 5 /slots sample(s) in a 0.460 s window, largest gap 100 ms" in flag


def test_a_window_sampled_finely_is_not_flagged():
    events = closed_loop_n1()
    marks = [mark("level_start", 0), mark("level_end", 600)]
    samples = [slots(t, [0], n=1) for t in range(0, 700, 40)]  # 12 readings, gaps ≤ 40 ms
    r = summarize_level(ctx(), events, marks, samples)
    assert r.occupancy.time_weighted_busy_slots == pytest.approx(1.0)
    assert not any(f.startswith("few_occupancy_samples") for f in r.flags)


def test_sampling_counts_good_readings_and_the_largest_gap():
    samples = [slots(100, [0]), failed_slots(200), slots(700, [0])]
    n, gap = occupancy.slots_sampling(samples, W)
    assert n == 2 and gap == 600 * MS  # 100 → 700; the failed poll is no reading


# --------------------------------------------------------------------- D6: printed precision

def scrape(t_ms: float, n_decode: int, busy_decodes: int):
    """What llama.cpp prints: C++ default stream precision, 6 significant digits."""
    text = (f"llamacpp:n_decode_total {n_decode:g}\n"
            f"llamacpp:n_busy_slots_per_decode {busy_decodes / n_decode:g}\n")
    return metrics(t_ms, **llamacpp_values(text))


def test_decode_weighted_is_dropped_when_printing_loses_the_digits_it_needs():
    n0, b0 = 12_345_678, 30_000_000  # a long-lived server: n_decode_total prints as 1.23457e+07
    samples = [scrape(10, n0, b0), scrape(990, n0 + 600, b0 + 4 * 600)]  # truth: 4 busy slots
    assert occupancy.decode_weighted_busy_slots(samples, W) is None
    value, why = occupancy.decode_weighted(samples, W)
    assert value is None and "6 significant digits" in why and "600 decodes" in why


def test_decode_weighted_is_kept_where_printing_is_exact_enough():
    n0, b0 = 54_321, 130_000
    samples = [scrape(10, n0, b0), scrape(990, n0 + 600, b0 + 4 * 600)]
    assert occupancy.decode_weighted_busy_slots(samples, W) == pytest.approx(4.0, rel=0.02)


def test_level_reports_why_the_decode_weighted_figure_is_missing():
    events = closed_loop_n1()
    marks = [mark("level_start", 0), mark("level_end", 600)]
    samples = [scrape(150, 12_345_678, 16_000_000), scrape(550, 12_345_678 + 600, 16_000_000 + 1200)]
    r = summarize_level(ctx(), events, marks, samples)
    assert r.occupancy.decode_weighted_busy_slots is None
    assert "significant digits" in r.unavailable["decode_weighted_busy_slots"]


def test_printed_rounding():
    assert occupancy.printed_rounding(12_345_700.0) == pytest.approx(50.0)  # 1.23457e+07
    assert occupancy.printed_rounding(1.37001) == pytest.approx(5e-6)
    assert occupancy.printed_rounding(54_321.0) == 0.0                     # an integer printed whole
    assert occupancy.printed_rounding(1.2345678901) == pytest.approx(5e-11)  # printed with more digits


def test_source_names_both_when_repetitions_used_different_sources():
    """Repetition 1 read /slots; in repetition 2 /slots failed and requests_processing stood in. The
    source said "slots" for the mean of both (the second's figure was not from /slots)."""
    first = closed_loop_n1(n_requests=5)
    second = [ev(phase="warmup", sent_ms=1000, chunks_ms=[1040, 1070, 1100], repetition=2)]
    for i in range(5):
        t0 = 1000 + 100 * (i + 1)
        second.append(ev(seq=i, sent_ms=t0, targeted_ms=t0, chunks_ms=[t0 + 40, t0 + 70, t0 + 100],
                         prompt_ms=30.0, prompt_n=16, repetition=2))
    marks = [mark("level_start", 0), mark("level_end", 600),
             mark("level_start", 1000, repetition=2), mark("level_end", 1600, repetition=2)]
    samples = [slots(t, [0], n=1) for t in range(0, 700, 50)]
    samples += [failed_slots(t) for t in range(1000, 1700, 50)]
    samples += [metrics(t, requests_processing=1.0) for t in range(1000, 1700, 20)]
    r = summarize_level(ctx(repetitions_planned=2), first + second, marks, samples)
    assert len([x for x in r.repetitions if x.window_s]) == 2
    assert r.occupancy.time_weighted_busy_slots == pytest.approx(1.0)
    assert r.occupancy.time_weighted_source == "requests_processing+slots"
