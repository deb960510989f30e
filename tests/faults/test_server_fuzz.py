"""Arbitrary server bytes into every reader of a server's answers: only satbench's own errors
(ParseError) or valid, range-checked results come out, never another exception."""

from __future__ import annotations

import asyncio
import itertools
import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from satbench.config import limits
from satbench.config.limits import checked_int, figure, json_answer
from satbench.errors import ParseError
from satbench.http.client import CompletionRequest, StreamClient, StreamOutcome, _PayloadReader
from satbench.http.endpoint import Endpoint
from satbench.http.promparse import llamacpp_values
from satbench.http.sse import SseSplitter, StreamUpdate, interpret_native, interpret_openai
from satbench.http.transport import HttpStream
from satbench.load.sampler import parse_slots
from satbench.server.facts import props_figures, shape_of

FUZZ = settings(max_examples=200, deadline=None)

SSE_BYTES = st.lists(st.sampled_from([b"data: ", b"data:", b"\r", b"\n", b"\r\n", b":", b" ", b"event: x",
                                      b'{"a":1}', b"[DONE]", b"x"]) | st.binary(max_size=12),
                     max_size=30).map(b"".join)

JSON_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-10**40, max_value=10**40) | st.floats()
    | st.text(max_size=6),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6), kids, max_size=3),
    max_leaves=10)

KEYS = ["content", "tokens", "tokens_predicted", "tokens_evaluated", "stop", "id_slot", "timings", "error",
        "choices", "usage", "text", "finish_reason", "completion_tokens", "prompt_tokens", "prompt_n",
        "prompt_ms", "predicted_n", "predicted_ms", "cache_n", "delta"]
STREAM_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-10**30, max_value=10**30) | st.floats()
    | st.text(max_size=4),
    lambda kids: st.lists(kids, max_size=2) | st.dictionaries(st.sampled_from(KEYS), kids, max_size=5),
    max_leaves=14)


def _chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


def _split(chunks: list[bytes]) -> list[bytes] | None:
    sp, out = SseSplitter(), []
    try:
        for c in chunks:
            out += sp.feed(c)
        return out + sp.finish()
    except ParseError:
        return None


@FUZZ
@given(SSE_BYTES, st.lists(st.integers(min_value=0, max_value=400), max_size=8))
def test_sse_splitter_gives_the_same_payloads_however_the_bytes_are_cut(data, cuts):
    whole = _split([data])
    assert _split(_chunks(data, cuts)) == whole
    assert whole is None or all(isinstance(p, bytes) for p in whole)


def _check_update(upd: StreamUpdate) -> None:
    counts = (upd.tokens_so_far, upd.usage_completion_tokens, upd.usage_prompt_tokens)
    for value, hi in [(c, limits.MAX_CTX_TOKENS) for c in counts] + [(upd.slot_id, limits.MAX_SLOTS - 1)]:
        assert value is None or (type(value) is int and 0 <= value <= hi)
    for key, v in (upd.timings or {}).items():
        assert key in ("cache_n", "prompt_n", "predicted_n", "prompt_ms", "predicted_ms")
        assert not isinstance(v, bool) and math.isfinite(v) and v >= 0


@FUZZ
@given(st.binary(max_size=200) | STREAM_JSON.map(lambda v: json.dumps(v).encode()))
def test_stream_payload_readers_give_checked_updates_or_parse_errors(payload):
    for interpret in (interpret_native, interpret_openai):
        try:
            upd = interpret(payload)
        except ParseError:
            continue
        _check_update(upd)


HTTP_PARTS = st.sampled_from([
    b"HTTP/1.1 200 OK\r\n", b"HTTP/1.1 503 X\r\n", b"HTTP/1.0 2", b"Transfer-Encoding: chunked\r\n",
    b"Content-Length: 5\r\n", b"Content-Length: -3\r\n", b"Content-Length: x\r\n", b"\r\n", b"\r\n\r\n",
    b"5\r\n", b"ffffffffffffffffffff\r\n", b"0\r\n\r\n", b"data: ", b'{"tokens":[1],"tokens_predicted":1}',
    b'{"stop":true,"tokens_predicted":99999999999,"id_slot":-4}', b"\n\n", b"zz\r\n", b";x\r\n"])


async def _exchange(chunks: list[bytes], limit: int):
    client = StreamClient(Endpoint.of("http://127.0.0.1:9"))
    req = CompletionRequest(request_id="r", prompt="p", prompt_tokens=1, max_tokens=1)
    out = StreamOutcome()
    reader = _PayloadReader(client, out)
    clock = iter(range(1, 10**9)).__next__
    proto = HttpStream(clock, reader.feed, max_body_bytes=limit, where="http://127.0.0.1:9/completion")
    for c in chunks:
        proto.data_received(c)
    proto.connection_lost(None)
    result = await proto.done
    assert result.failure is None or isinstance(result.failure, ParseError)
    out.finished = reader.finished
    client._read_result(req, result, out)
    return result, out


@FUZZ
@given(st.lists(HTTP_PARTS | st.binary(max_size=40), max_size=25), st.integers(min_value=0, max_value=300))
def test_http_stream_takes_arbitrary_chunks(chunks, limit):
    result, out = asyncio.run(_exchange(chunks, limit))
    assert len(result.error_body) <= limits.MAX_ERROR_BODY_BYTES
    assert out.error_type is None or isinstance(out.error_type, str)
    assert 0 <= out.output_tokens <= limits.MAX_CTX_TOKENS * 2


@FUZZ
@given(st.dictionaries(st.sampled_from(["total_slots", "default_generation_settings", "model_path",
                                        "model_alias", "build_info", "x"]),
                       JSON_VALUE | st.dictionaries(st.sampled_from(["n_ctx", "id"]), JSON_VALUE, max_size=2),
                       max_size=5))
def test_props_figures_are_checked_or_unavailable_never_an_exception(props):
    fig = props_figures(props, "http://h/props")
    assert fig.total_slots is None or (type(fig.total_slots) is int
                                       and 1 <= fig.total_slots <= limits.MAX_SLOTS)
    assert fig.per_slot_ctx is None or (type(fig.per_slot_ctx) is int
                                        and 1 <= fig.per_slot_ctx <= limits.MAX_CTX_TOKENS)
    for text in (fig.model_path, fig.model_alias, fig.build_info):
        assert text is None or (isinstance(text, str) and len(text) <= limits.MAX_SERVER_TEXT_CHARS)
    assert all(u.startswith("http://h/props: ") for u in fig.unavailable)
    assert shape_of(props) == (fig.total_slots, fig.per_slot_ctx)


@FUZZ
@given(st.binary(max_size=300) | st.lists(st.sampled_from(
    [b"llamacpp:n_decode_total", b"llamacpp:requests_processing", b" ", b"{a=\"b\"}", b"-1", b"1e300",
     b"NaN", b"\n", b"# x", b"\xff", b"7"]), max_size=30).map(b"".join))
def test_metrics_text_gives_finite_in_range_values_or_parse_errors(data):
    try:
        values = llamacpp_values(data.decode("utf-8", "replace"))
    except ParseError:
        return
    assert len(values) <= limits.MAX_METRIC_SERIES
    assert all(isinstance(v, float) and 0 <= v <= limits.MAX_METRIC_VALUE for v in values.values())


NEXT_TOKEN = st.lists(st.fixed_dictionaries({}, optional={"n_decoded": JSON_VALUE | st.integers()}),
                      max_size=2)
SLOT = st.fixed_dictionaries({"id": JSON_VALUE | st.integers(min_value=-2, max_value=70_000)},
                             optional={"is_processing": JSON_VALUE | st.booleans(), "next_token": NEXT_TOKEN})
SLOTS_CASE = (st.binary(max_size=200).map(lambda b: ("raw", b))
              | st.lists(SLOT, max_size=5).map(lambda v: ("json", v)))


@FUZZ
@given(SLOTS_CASE)
def test_slots_answers_give_valid_samples_or_parse_errors(case):
    kind, value = case
    try:
        payload = json_answer(value, "/slots") if kind == "raw" else value
        n, busy, decoded = parse_slots(payload)
    except ParseError:
        return
    assert n == len(payload) and len(set(busy)) == len(busy) and set(decoded) <= set(busy)
    assert all(type(i) is int and 0 <= i < limits.MAX_SLOTS for i in busy)
    assert all(type(v) is int and 0 <= v <= limits.MAX_CTX_TOKENS for v in decoded.values())


@FUZZ
@given(JSON_VALUE)
def test_the_number_checks_accept_only_json_integers_in_range(value):
    ok = type(value) is int and 1 <= value <= 100
    got, why = figure(value, 1, 100, "n")
    assert (got == value and why is None) if ok else got is None
    assert (why is None) == (ok or value is None)
    if not ok and value is not None:
        try:
            checked_int(value, 1, 100, "n")
            raise AssertionError("accepted")
        except ParseError:
            pass


def test_json_answer_turns_deep_nesting_into_a_parse_error():
    try:
        json_answer(b"[" * 100_000, "http://h/slots")
        raise AssertionError("accepted")
    except ParseError as exc:
        assert str(exc) == "http://h/slots: not JSON"
