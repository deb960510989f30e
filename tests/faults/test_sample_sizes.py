"""A sample is written up to 10 times a second: what a server answers cannot make one large. A /metrics
series named past MAX_METRIC_NAME_CHARS, or a /slots listing more slots than /props' total_slots, is a
small error sample (a ParseError), never a copy of the answer."""

from __future__ import annotations

import asyncio
import itertools
import json

import pytest

from satbench.config.limits import (
    KIB,
    MAX_METRIC_NAME_CHARS,
    MAX_METRIC_SERIES,
    MAX_METRICS_BYTES,
    MAX_SLOTS_BYTES,
)
from satbench.errors import ParseError
from satbench.http.endpoint import Endpoint
from satbench.http.promparse import llamacpp_values
from satbench.load.sampler import ServerSampler, parse_slots
from satbench.records.events import MetricsSample, SlotsSample
from tests.builders import ListSink

SMALL_SAMPLE_BYTES = 4 * KIB  # an error sample: its tags and a one-line reason of at most 300 characters


def _sampler(answer: bytes, **kw) -> tuple[ServerSampler, ListSink]:
    tick = itertools.count(0, 1000)
    w = ListSink()
    s = ServerSampler(Endpoint.of("http://127.0.0.1:9"), "default", w, interval_s=0.0,
                      clock=lambda: next(tick), **kw)

    async def get(path: str) -> tuple[int, bytes]:
        return 200, answer
    s._get = get  # type: ignore[method-assign]
    return s, w


def _size(sample) -> int:
    return len(sample.model_dump_json())


def _long_label_metrics(n: int, label_chars: int) -> bytes:
    return "".join(f'llamacpp:requests_processing{{slot="{i}",x="{"a" * label_chars}"}} 1\n'
                   for i in range(n)).encode()


def test_metrics_with_4_kib_labels_is_a_small_error_sample():
    body = _long_label_metrics(MAX_METRIC_SERIES, 4 * KIB - 80)  # 256 series × ~4 KiB: ~1 MiB of keys
    assert len(body) <= MAX_METRICS_BYTES  # within the read limit: the name cap is what refuses it
    s, w = _sampler(body)
    assert asyncio.run(s._metrics()) is False
    [sample] = w.records
    assert isinstance(sample, MetricsSample) and not sample.values
    assert f"longer than {MAX_METRIC_NAME_CHARS} characters" in sample.error
    assert _size(sample) < SMALL_SAMPLE_BYTES


def test_metrics_kept_stays_small_at_its_limits():
    """The most a /metrics sample can hold: MAX_METRIC_SERIES series, each name at the cap."""
    pad = MAX_METRIC_NAME_CHARS - len('llamacpp:s{i="000",x=""}')
    body = "".join(f'llamacpp:s{{i="{i:03d}",x="{"a" * pad}"}} 1\n'
                   for i in range(MAX_METRIC_SERIES)).encode()
    s, w = _sampler(body)
    assert asyncio.run(s._metrics()) is True
    [sample] = w.records
    assert len(sample.values) == MAX_METRIC_SERIES
    assert _size(sample) < 100 * KIB


def test_a_long_series_of_another_exporter_is_not_kept_nor_refused():
    text = f'other_series{{x="{"a" * 10_000}"}} 1\nllamacpp:requests_processing 2\n'
    assert llamacpp_values(text) == {"requests_processing": 2.0}


def test_a_series_name_one_past_the_cap_is_refused():
    name = "llamacpp:" + "n" * (MAX_METRIC_NAME_CHARS - len("llamacpp:"))
    assert llamacpp_values(f"{name} 1\n") == {name[len("llamacpp:"):]: 1.0}
    with pytest.raises(ParseError, match=f"longer than {MAX_METRIC_NAME_CHARS} characters"):
        llamacpp_values(f"{name}n 1\n")


def _slots(n: int) -> list[dict]:
    return [{"id": i, "is_processing": True, "next_token": [{"n_decoded": 7}]} for i in range(n)]


def test_slots_listing_more_than_total_slots_is_refused():
    with pytest.raises(ParseError, match="lists 5 slots, more than the 4 of /props total_slots"):
        parse_slots(_slots(5), total_slots=4)
    assert parse_slots(_slots(4), total_slots=4)[0] == 4
    assert parse_slots(_slots(5))[0] == 5  # total_slots unknown: MAX_SLOTS alone bounds it


def test_a_slots_answer_beyond_total_slots_is_a_small_error_sample():
    body = json.dumps(_slots(20_000)).encode()  # ~1 MiB of entries, within MAX_SLOTS_BYTES
    assert len(body) <= MAX_SLOTS_BYTES
    s, w = _sampler(body, total_slots=4)
    assert asyncio.run(s._slots()) is False
    [sample] = w.records
    assert isinstance(sample, SlotsSample) and sample.busy_ids == [] and sample.n_decoded == {}
    assert "more than the 4 of /props total_slots" in sample.error
    assert _size(sample) < SMALL_SAMPLE_BYTES


def test_a_slots_sample_of_a_full_server_is_small():
    s, w = _sampler(json.dumps(_slots(4)).encode(), total_slots=4)
    assert asyncio.run(s._slots()) is True
    [sample] = w.records
    assert sample.busy_ids == [0, 1, 2, 3] and _size(sample) < SMALL_SAMPLE_BYTES


def test_the_slots_limit_holds_a_thousand_llamacpp_slots():
    """One slot's /slots entry as llama-server b11549 prints it (params with the sampler settings)
    weighs ~3 KiB: MAX_SLOTS_BYTES holds ~1,000 of them."""
    params = {"n_predict": 128, "seed": 4294967295, "temperature": 0.8, "dynatemp_range": 0.0,
              "dynatemp_exponent": 1.0, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "top_n_sigma": -1.0,
              "xtc_probability": 0.0, "xtc_threshold": 0.1, "typical_p": 1.0, "repeat_last_n": 64,
              "repeat_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "dry_multiplier": 0.0,
              "dry_base": 1.75, "dry_allowed_length": 2, "dry_penalty_last_n": 4096,
              "dry_sequence_breakers": ["\n", ":", "\"", "*"], "mirostat": 0, "mirostat_tau": 5.0,
              "mirostat_eta": 0.1, "stop": [], "max_tokens": 128, "n_keep": 0, "n_discard": 0,
              "ignore_eos": False, "stream": True, "logit_bias": [], "n_probs": 0, "min_keep": 0,
              "grammar": "", "grammar_lazy": False, "grammar_triggers": [], "preserved_tokens": [],
              "chat_format": "Content-only", "reasoning_format": "auto", "reasoning_in_content": False,
              "thinking_forced_open": False, "samplers": ["penalties", "dry", "top_n_sigma", "top_k",
                                                          "typ_p", "top_p", "min_p", "xtc", "temperature"],
              "speculative.n_max": 16, "speculative.n_min": 0, "speculative.p_min": 0.75,
              "timings_per_token": False, "post_sampling_probs": False, "lora": []}
    slot = {"id": 999, "id_task": 123456, "n_ctx": 4096, "speculative": False, "is_processing": True,
            "params": params, "prompt": "", "next_token": [{"has_next_token": True, "has_new_line": False,
                                                             "n_remain": 100, "n_decoded": 28,
                                                             "stopping_word": ""}]}
    one = len(json.dumps(slot, separators=(",", ":")))
    assert 1 * KIB < one < 4 * KIB
    assert MAX_SLOTS_BYTES // one >= 1000
