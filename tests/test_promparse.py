"""/metrics parsing, including llama.cpp's real exposition; fuzzed briefly."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from satbench.errors import ParseError
from satbench.promparse import llamacpp_values, parse_prometheus

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
    try:
        llamacpp_values(text)
    except ParseError:
        pass
