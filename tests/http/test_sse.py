"""SSE framing and event interpretation; fuzzed for a bounded time (only ParseError may escape)."""

import contextlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from satbench.errors import ParseError
from satbench.http.sse import SseSplitter, interpret_native, interpret_openai


def test_splitter_handles_arbitrary_chunk_boundaries_and_crlf():
    stream = b'data: {"a":1}\r\n\r\n: comment\n\ndata: {"b":2}\n\ndata: x\ndata: y\n\n'
    for cut in range(1, len(stream)):
        s = SseSplitter()
        out = s.feed(stream[:cut]) + s.feed(stream[cut:]) + s.finish()
        assert out == [b'{"a":1}', b'{"b":2}', b"x\ny"]


def test_splitter_returns_an_unterminated_last_event_on_finish():
    s = SseSplitter()
    assert s.feed(b"data: last") == []
    assert s.finish() == [b"last"]


def test_native_token_chunk_and_final_event():
    upd = interpret_native(b'{"content":"hi","tokens":[5],"stop":false,"id_slot":-1}')
    assert (upd.n_tokens, upd.exact, upd.final) == (1, True, False)
    final = interpret_native(json.dumps({
        "content": "", "tokens": [], "stop": True, "id_slot": 3, "tokens_predicted": 8,
        "timings": {"prompt_n": 6, "prompt_ms": 22.4, "predicted_n": 8}}).encode())
    assert final.final and final.slot_id == 3 and final.timings["prompt_ms"] == 22.4
    assert final.n_tokens == 0


def test_native_error_event_is_reported():
    upd = interpret_native(b'{"error":{"code":500,"message":"boom","type":"server_error"}}')
    assert upd.error == "boom"


def test_openai_chunks_usage_and_done():
    assert interpret_openai(b'{"choices":[{"text":"a","index":0}]}').n_tokens == 1
    usage = interpret_openai(b'{"choices":[],"usage":{"completion_tokens":7,"prompt_tokens":3}}')
    assert usage.final and usage.usage_completion_tokens == 7
    assert interpret_openai(b"[DONE]").done_marker


@pytest.mark.parametrize("payload", [b"{", b"[1,2]", b"\xff\xfe",
                                     b'{"tokens":[1],"stop":true,"id_slot":"x"}'])
def test_malformed_payloads_raise_parse_error(payload):
    with pytest.raises(ParseError):
        interpret_native(payload)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=12))
def test_fuzz_splitter_and_interpreters_raise_only_parse_error(chunks):
    s = SseSplitter()
    payloads = []
    for c in chunks:
        payloads += s.feed(c)
    payloads += s.finish()
    for p in payloads:
        for interpret in (interpret_native, interpret_openai):
            with contextlib.suppress(ParseError):
                interpret(p)


@settings(max_examples=300, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(
                        st.sampled_from(["tokens", "stop", "id_slot", "timings", "error", "content",
                                         "choices", "usage", "text", "completion_tokens"]), kids, max_size=4),
                    max_leaves=12))
def test_fuzz_json_shapes_raise_only_parse_error(obj):
    payload = json.dumps(obj).encode()
    for interpret in (interpret_native, interpret_openai):
        with contextlib.suppress(ParseError):
            interpret(payload)
