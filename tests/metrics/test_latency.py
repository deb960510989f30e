"""Per-request metrics are exact functions of the recorded stamps."""

import pytest

from satbench.metrics import latency
from satbench.records.events import itl_ms
from tests.builders import ev


def test_ttft_is_first_token_chunk_minus_sent():
    e = ev(sent_ms=100, chunks_ms=[130, 140, 150])
    assert latency.ttft_ms(e) == pytest.approx(30.0)


def test_ttft_skips_chunks_without_tokens():
    e = ev(sent_ms=0, chunks_ms=[5, 25, 35])
    e.chunks[0] = (e.chunks[0][0], 0)  # an empty first chunk (e.g. a role or keep-alive event)
    assert latency.ttft_ms(e) == pytest.approx(25.0)


def test_e2e_tpot_and_itl():
    e = ev(sent_ms=0, chunks_ms=[50, 60, 75, 95], end_ms=100)
    assert latency.e2e_ms(e) == pytest.approx(100.0)
    # (E2E - TTFT) / (4 - 1) = (100 - 50) / 3
    assert latency.tpot_ms(e) == pytest.approx(50.0 / 3)
    assert itl_ms(e) == pytest.approx([10.0, 15.0, 20.0])


def test_itl_divides_a_gap_by_the_tokens_of_the_later_chunk():
    e = ev(sent_ms=0, chunks_ms=[10, 40], tokens_per_chunk=3)
    assert itl_ms(e) == pytest.approx([10.0])  # 30 ms gap / 3 tokens


def test_tpot_undefined_for_one_token():
    assert latency.tpot_ms(ev(sent_ms=0, chunks_ms=[10])) is None


def test_queue_time_estimate_subtracts_prefill_and_overhead_and_clamps():
    e = ev(sent_ms=0, chunks_ms=[80, 90], prompt_ms=50.0, prompt_n=16)
    assert latency.queue_time_ms(e, overhead_ms=0.5) == pytest.approx(29.5)
    assert latency.queue_time_ms(e, overhead_ms=40.0) == 0.0
    assert latency.queue_time_ms(ev(sent_ms=0, chunks_ms=[80]), overhead_ms=0.5) is None
