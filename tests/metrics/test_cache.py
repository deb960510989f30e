"""Prompt-cache figures (metrics/cache.py) on hand-made requests: each formula on exact numbers, the
history found rate of returning conversation turns, no figures without llama.cpp's timings, and the
level table, CSV and compare of a run with and without them."""

from __future__ import annotations

import pytest

from satbench.metrics.cache import HISTORY_FOUND, cache_figures, hit_ratio
from satbench.metrics.level import summarize_level
from satbench.metrics.specs import csv_columns, figure, part_of, table_columns
from satbench.metrics.stats import mean_estimate
from satbench.records.events import RequestEvent, ServerTimings
from satbench.report.compare import compare_level
from satbench.report.table import LEVEL_HEADERS, LEVEL_TABLE, level_row
from tests.builders import ev, mark
from tests.metrics.test_level import closed_loop_n1, ctx
from tests.report.test_compare import level

HIT = mean_estimate([0.5])  # a hit ratio to hand cache_figures where the test is about other figures


def req(*, cache_n: int | None, prompt_n: int | None, ttft_ms: float = 10.0, prompt_ms: float | None = None,
        sent_ms: float = 0.0, stream: int = 0, seq: int = 0, repetition: int = 1, phase: str = "measured",
        conversation: int | None = None, turn: int | None = None, error: str | None = None) -> RequestEvent:
    """One request with the server's timings as given, its first token `ttft_ms` after it was sent."""
    e = ev(stream=stream, seq=seq, sent_ms=sent_ms, chunks_ms=[sent_ms + ttft_ms, sent_ms + ttft_ms + 5],
           repetition=repetition, phase=phase, error=error)
    timings = ServerTimings(cache_n=cache_n, prompt_n=prompt_n, prompt_ms=prompt_ms)
    return e.model_copy(update={"timings": timings, "conversation": conversation, "turn": turn})


def turn(conversation: int, k: int, cache_n: int, prompt_n: int, **kw) -> RequestEvent:
    return req(cache_n=cache_n, prompt_n=prompt_n, conversation=conversation, turn=k, stream=conversation,
               seq=10 * conversation + k, **kw)


def test_each_formula_on_exact_numbers():
    events = [req(cache_n=0, prompt_n=100, ttft_ms=100, prompt_ms=50.0),
              req(cache_n=300, prompt_n=100, ttft_ms=20, prompt_ms=20.0, seq=1),
              req(cache_n=100, prompt_n=100, ttft_ms=40, prompt_ms=30.0, seq=2)]
    assert hit_ratio(events) == pytest.approx(400 / 700)  # Σ cache_n ÷ Σ (cache_n + prompt_n)
    c = cache_figures(events, HIT)
    assert c is not None and c.requests == 3 and c.cache_hit_ratio == HIT
    assert c.cache_hit_ratio_p50 == pytest.approx(0.5)  # median of 0, 0.75, 0.5
    assert (c.cached_prompt_tokens_p50, c.new_prompt_tokens_p50) == (100, 100)
    assert c.ttft_cache_hit_p50_ms == pytest.approx(30.0)  # the two with cache_n > 0: 20 and 40 ms
    assert c.ttft_cache_miss_p50_ms == pytest.approx(100.0)
    assert c.prefill_ms_per_new_token == pytest.approx(100.0 / 300)  # Σ prompt_ms ÷ Σ prompt_n
    assert (c.returning_turns, c.history_found_rate) == (0, None)  # no conversation: no returning turn


def test_only_successful_measured_requests_count():
    events = [req(cache_n=100, prompt_n=100),
              req(cache_n=900, prompt_n=100, phase="warmup", seq=1),
              req(cache_n=900, prompt_n=100, error="http_500", seq=2)]
    assert hit_ratio(events) == pytest.approx(0.5)
    c = cache_figures(events, HIT)
    assert c is not None and c.requests == 1 and c.ttft_cache_miss_p50_ms is None


def test_history_found_rate_falls_when_a_returning_turn_finds_little():
    kept = [turn(0, 1, 0, 100), turn(0, 2, 100, 50), turn(0, 3, 150, 50),
            turn(1, 1, 0, 100), turn(1, 2, 100, 60)]
    c = cache_figures(kept, HIT)
    assert c is not None and (c.returning_turns, c.history_found_rate) == (3, 1.0)
    lost = kept[:-1] + [turn(1, 2, 20, 140)]  # its slot went to another conversation: 20 < 0.9 × 100
    c = cache_figures(lost, HIT)
    assert c is not None and c.returning_turns == 3
    assert c.history_found_rate == pytest.approx(2 / 3)


def test_ttft_splits_by_whether_a_returning_turn_found_its_history():
    """What losing the slot cost: the median TTFT of the returning turns that found their history
    against those that did not; first turns count in neither."""
    events = [turn(0, 1, 0, 100, ttft_ms=500), turn(0, 2, 100, 50, ttft_ms=40),
              turn(0, 3, 150, 50, ttft_ms=60), turn(1, 1, 0, 100, ttft_ms=500),
              turn(1, 2, 20, 140, ttft_ms=300)]
    c = cache_figures(events, HIT)
    assert c is not None and c.ttft_history_found_p50_ms == pytest.approx(50.0)
    assert c.ttft_history_lost_p50_ms == pytest.approx(300.0)
    c = cache_figures(events[:3], HIT)
    assert c is not None and c.ttft_history_lost_p50_ms is None


def test_the_threshold_is_a_share_of_the_previous_turns_whole_prompt():
    previous = turn(0, 1, 40, 160)  # the server's prompt: 40 + 160 = 200 tokens
    at = int(HISTORY_FOUND * 200)
    for cache_n, found in ((at, 1.0), (at - 1, 0.0)):
        c = cache_figures([previous, turn(0, 2, cache_n, 10)], HIT)
        assert c is not None and c.history_found_rate == found, cache_n


def test_a_returning_turn_without_its_previous_one_in_the_same_repetition_is_not_judged():
    events = [turn(0, 1, 0, 100, repetition=1), turn(0, 2, 100, 50, repetition=2),
              turn(1, 1, 0, 100, error="http_500"), turn(1, 2, 0, 150)]
    c = cache_figures(events, HIT)
    assert c is not None and (c.returning_turns, c.history_found_rate) == (0, None)


def test_no_figures_without_timings_or_without_cache_n():
    bare = [ev(sent_ms=0, chunks_ms=[10, 20])]
    no_cache_n = [req(cache_n=None, prompt_n=100, prompt_ms=30.0)]
    for events in (bare, no_cache_n, [req(cache_n=5, prompt_n=5, phase="warmup")]):
        assert hit_ratio(events) is None and cache_figures(events, HIT) is None


def _summarized(events: list[RequestEvent]):
    marks = [mark("level_start", 0), mark("level_end", 600), mark("level_start", 1000, repetition=2),
             mark("level_end", 1600, repetition=2)]
    return summarize_level(ctx(), events, marks, [])


def _two_repetitions(cache_n: tuple[int, int]) -> list[RequestEvent]:
    """closed_loop_n1 in repetitions 1 and 2, every request of repetition r with cache_n[r − 1] of its
    prompt of 100 tokens from the cache."""
    out = []
    for rep, cached in enumerate(cache_n, 1):
        for e in closed_loop_n1():
            shift = (rep - 1) * 1_000_000_000
            timings = ServerTimings(cache_n=cached, prompt_n=100 - cached, prompt_ms=30.0)
            out.append(e.model_copy(update={
                "repetition": rep, "timings": timings, "sent_ns": e.sent_ns + shift,
                "end_ns": e.end_ns + shift, "targeted_ns": e.targeted_ns + shift,
                "headers_ns": (e.headers_ns or e.sent_ns) + shift,
                "chunks": [(t + shift, n) for t, n in e.chunks]}))
    return out


def test_a_level_holds_its_repetitions_hit_ratios_and_their_mean():
    lv = _summarized(_two_repetitions((20, 60)))
    assert [r.cache_hit_ratio for r in lv.repetitions] == [pytest.approx(0.2), pytest.approx(0.6)]
    assert lv.cache is not None and lv.cache.cache_hit_ratio.value == pytest.approx(0.4)
    assert lv.cache.cache_hit_ratio.n == 2 and lv.cache.cache_hit_ratio.ci_low == 0.0  # floored at 0
    assert lv.cache.requests == 10 and lv.cache.cached_prompt_tokens_p50 == pytest.approx(40.0)


def test_a_level_without_timings_has_no_cache_figures():
    events = [e.model_copy(update={"timings": None}) for e in _two_repetitions((0, 0))]
    lv = _summarized(events)
    assert lv.cache is None and all(r.cache_hit_ratio is None for r in lv.repetitions)
    assert figure(lv, "cache.cache_hit_ratio") is None
    assert all(part_of(figure(lv, s.path), p) is None for _, s, p in csv_columns() if s.family == "cache")


def test_the_table_shows_the_cache_column_only_where_the_cache_was_in_play():
    before = level(2)
    assert table_columns([before]) == LEVEL_TABLE and len(level_row(before)) == len(LEVEL_HEADERS)
    idle = _summarized(_two_repetitions((0, 0)))  # llama.cpp timings, nothing taken from the cache
    assert idle.cache is not None and idle.cache.cache_hit_ratio.value == 0.0
    assert table_columns([idle]) == LEVEL_TABLE
    events = _two_repetitions((20, 60)) + [turn(0, 1, 0, 100, sent_ms=700), turn(0, 2, 95, 40, sent_ms=800),
                                           turn(1, 1, 0, 100, sent_ms=700), turn(1, 2, 30, 110, sent_ms=800)]
    busy = _summarized(events)
    columns = table_columns([before, busy])
    headers = [h for h, _ in columns]
    assert headers == [*LEVEL_HEADERS[:-1], "cache hit/found", "flags"]  # right of RSS MiB
    # repetition 1: (5 × 20 + 95 + 30) ÷ (500 + 100 + 135 + 100 + 140) = 0.2308, repetition 2: 0.6
    assert busy.cache is not None and busy.cache.cache_hit_ratio.value == pytest.approx((225 / 975 + 0.6) / 2)
    assert level_row(busy, columns)[-2] == "42%/50%"  # one of the two returning turns found its history
    assert level_row(before, columns)[-2] == "n/a/n/a"


def test_compare_leaves_out_the_cache_figure_a_level_lacks():
    names = [m.metric for m in compare_level(level(2), level(2, seed=1), "solo").metrics]
    assert "cache_hit_ratio" not in names and "p95_e2e_ms" in names
    a, b = _summarized(_two_repetitions((20, 60))), _summarized(_two_repetitions((40, 80)))
    got = {m.metric: m for m in compare_level(a, b, "solo").metrics}
    assert got["cache_hit_ratio"].ratio.value == pytest.approx(0.6 / 0.4)
