"""/metrics parsing, including llama.cpp's real exposition; fuzzed briefly."""

import contextlib
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from satbench.errors import ParseError
from satbench.http.promparse import llamacpp_values, parse_prometheus

REAL = """# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 6
llamacpp:n_decode_total 9
llamacpp:n_busy_slots_per_decode 1
llamacpp:predicted_tokens_seconds 96.9113
other_metric{le="0.5"} 3 1700000000
"""


def test_llamacpp_values_strip_the_prefix_and_keep_only_llamacpp():
    v = llamacpp_values(REAL)
    assert v == {"prompt_tokens_total": 6.0, "n_decode_total": 9.0,
                 "n_busy_slots_per_decode": 1.0, "predicted_tokens_seconds": 96.9113}


def test_labels_and_timestamps():
    assert parse_prometheus(REAL)['other_metric{le="0.5"}'] == 3.0


@pytest.mark.parametrize("text", ["llamacpp:x", "llamacpp:x abc", "a{b 1", "x 1 2 3"])
def test_malformed_lines_raise_parse_error(text):
    with pytest.raises(ParseError):
        parse_prometheus(text)


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=200))
def test_fuzz_only_parse_error_escapes(text):
    with contextlib.suppress(ParseError):
        llamacpp_values(text)


_NAME = st.sampled_from(["llamacpp:n_decode_total", "llamacpp:requests_processing", "x", "llamacpp:", "a:b:c",
                         ""])
_LABELS = st.sampled_from(["", "{}", '{le="0.5"}', '{a="}"}', "{", '{a="x",b="y"}', "{a=}"])
_VALUE = st.sampled_from(["1", "-2.5e3", "NaN", "+Inf", "-Inf", "1e999", "0x10", "", "abc", "1_0"])
_TAIL = st.sampled_from(["", " 1700000000", " x", " 1 2", "\t", " # comment"])


@settings(max_examples=600, deadline=None)
@given(st.lists(st.one_of(
    st.builds(lambda n, lab, v, t: f"{n}{lab} {v}{t}", _NAME, _LABELS, _VALUE, _TAIL),
    st.sampled_from(["# HELP x y", "# TYPE x counter", "", "   ", "#"]),
    st.text(max_size=30)), max_size=12))
def test_fuzz_structured_exposition_only_parse_error_escapes(lines):
    """Lines shaped like the exposition format (names, labels, odd values, timestamps) reach the
    parser's deeper branches than random text does."""
    try:
        values = llamacpp_values("\n".join(lines))
    except ParseError:
        return
    # finite only: a NaN or inf would be written as null and make server_samples.jsonl unreadable
    assert all(isinstance(v, float) and math.isfinite(v) for v in values.values())


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4),
                     lambda kids: st.lists(kids, max_size=3) | st.dictionaries(
                         st.sampled_from(["id", "is_processing", "next_token", "n_decoded", "x"]), kids,
                         max_size=4),
                     max_leaves=12)


@settings(max_examples=400, deadline=None)
@given(_JSON)
def test_fuzz_slots_payload_only_parse_error_escapes(payload):
    from satbench.load.sampler import parse_slots

    try:
        n, busy, decoded = parse_slots(payload)
    except ParseError:
        return
    assert n == len(payload) and set(decoded) <= set(busy)
