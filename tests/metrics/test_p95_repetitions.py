"""A p95 ratio's CI spans repetitions (compare and interference), and a percentile's CI holds its estimate."""

from __future__ import annotations

import random

import pytest

from satbench.metrics.interference import interference
from satbench.metrics.level import summarize_level
from satbench.metrics.level_result import LevelContext, LevelResult
from satbench.metrics.stats import percentile, percentile_ci
from satbench.report.compare import compare_level
from tests.builders import ev, mark

TOKENS = 10


def _repetition(rep: int, itl_ms: float, n_requests: int = 40):
    """One closed-loop stream: TTFT 40 ms, then TOKENS−1 gaps of `itl_ms`; its own stretch of time."""
    t0 = rep * 1_000_000.0
    dur = 40 + itl_ms * (TOKENS - 1)

    def request(sent: float, **kw):
        return ev(repetition=rep, sent_ms=sent, chunks_ms=[sent + 40 + itl_ms * k for k in range(TOKENS)],
                  prompt_ms=30.0, prompt_n=16, **kw)

    events = [request(t0, phase="warmup")]
    events += [request(t0 + dur * (i + 1), seq=i) for i in range(n_requests)]
    marks = [mark("level_start", t0, repetition=rep),
             mark("level_end", t0 + dur * (n_requests + 1), repetition=rep)]
    return events, marks


def level(*itls_ms: float) -> LevelResult:
    """N=1 with one repetition per ITL: each repetition steady, the repetitions apart from each other."""
    events, marks = [], []
    for rep, itl in enumerate(itls_ms, 1):
        e, m = _repetition(rep, itl)
        events += e
        marks += m
    ctx = LevelContext(lane="default", level=1, repetitions_planned=len(itls_ms),
                       measured_requests_planned=40, slots=1, per_slot_ctx=256, prompt_tokens=16,
                       output_tokens=TOKENS, overhead_ms=0.0, llamacpp=True)
    return summarize_level(ctx, events, marks, [])


def itl(a: LevelResult, b: LevelResult):
    return next(m for m in compare_level(a, b, "solo").metrics if m.metric == "p95_itl_ms")


# ------------------------------------------------------------------------------------------- D2

def test_two_one_repetition_runs_of_one_server_are_not_called_different():
    """The reviewer's repro in miniature: repetitions of one run, analysed as two runs of one
    repetition each. 360 pooled gaps give a tight order-statistic CI, but one repetition says
    nothing about how much the next one moves."""
    a, b = level(30.0), level(21.0)
    m = itl(a, b)
    assert m.ratio.value == pytest.approx(0.7)
    assert m.ratio.ci_low is None and m.ratio.ci_high is None
    assert not m.significant and m.direction == "same"


def test_three_repetitions_that_scatter_as_much_as_the_difference_are_not_significant():
    a, b = level(30.0, 20.0, 25.0), level(28.0, 19.0, 24.0)
    assert a.latency.itl_ms.p95 == pytest.approx(30.0) and b.latency.itl_ms.p95 == pytest.approx(28.0)
    m = itl(a, b)
    assert m.ratio.value == pytest.approx(28 / 30)
    assert m.ratio.ci_low < 1.0 < m.ratio.ci_high
    assert not m.significant


def test_a_change_far_beyond_the_repetitions_scatter_is_still_significant():
    a, b = level(20.0, 21.0, 22.0), level(40.0, 41.0, 42.0)
    m = itl(a, b)
    assert m.ratio.value == pytest.approx(42 / 22)
    assert 1.0 < m.ratio.ci_low < m.ratio.value < m.ratio.ci_high
    assert m.significant and m.direction == "worse"


def test_repetitions_carry_their_own_p95s():
    lv = level(30.0, 20.0)
    assert [r.p95_itl_ms for r in lv.repetitions] == [pytest.approx(30.0), pytest.approx(20.0)]
    assert [r.p95_ttft_ms for r in lv.repetitions] == [pytest.approx(40.0)] * 2
    assert lv.repetitions[0].p95_e2e_ms == pytest.approx(40 + 30.0 * (TOKENS - 1))


def test_interference_p95_ci_spans_repetitions_too():
    row = interference([level(30.0)], [level(21.0)])[0]
    assert row.p95_itl_ms.value == pytest.approx(0.7)
    assert row.p95_itl_ms.ci_low is None and row.p95_itl_ms.ci_high is None
    row = interference([level(20.0, 21.0, 22.0)], [level(40.0, 41.0, 42.0)])[0]
    assert 1.0 < row.p95_itl_ms.ci_low < row.p95_itl_ms.value < row.p95_itl_ms.ci_high


# ------------------------------------------------------------------------------------------- D3

def test_percentile_ci_contains_its_estimate_for_two_samples():
    ci = percentile_ci([1.0, 2.0], 99)
    assert percentile([1.0, 2.0], 99) == pytest.approx(1.99)
    assert ci.low is not None and ci.low <= 1.99


@pytest.mark.parametrize("n", list(range(1, 41)) + [99, 100, 101, 250])
def test_percentile_ci_always_contains_its_estimate(n):
    rng = random.Random(n)
    values = sorted(rng.uniform(0, 100) for _ in range(n))
    for pct in (50, 90, 95, 99):
        point, ci = percentile(values, pct), percentile_ci(values, pct)
        assert ci.low is None or ci.low <= point, (n, pct)
        assert ci.high is None or point <= ci.high, (n, pct)
