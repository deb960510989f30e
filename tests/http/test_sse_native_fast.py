"""interpret_native reads llama.cpp's partial events by one match (`_NATIVE_PARTIAL`) instead of a
JSON parse: for every payload, matched or not, the result is the JSON path's, or both refuse it."""

from __future__ import annotations

import json
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from satbench.config.limits import MAX_CTX_TOKENS
from satbench.errors import ParseError
from satbench.http.sse import _NATIVE_PARTIAL, _interpret_native_json, interpret_native

TYPICAL = (b'{"index":0,"content":" tok","tokens":[1234],"stop":false,"id_slot":-1,'
           b'"tokens_predicted":5,"tokens_evaluated":16}')


def _both(payload: bytes):
    out = []
    for f in (interpret_native, _interpret_native_json):
        try:
            out.append(f(payload))
        except ParseError as exc:
            out.append(("ParseError", str(exc)))
    return out


def test_llama_cpps_partial_event_takes_the_match():
    assert _NATIVE_PARTIAL.fullmatch(TYPICAL) is not None
    upd = interpret_native(TYPICAL)
    assert (upd.n_tokens, upd.tokens_so_far, upd.exact, upd.final) == (1, 5, True, False)


def test_a_final_event_takes_the_json_path():
    final = TYPICAL.replace(b'"stop":false', b'"stop":true').replace(b'"id_slot":-1', b'"id_slot":3')
    assert _NATIVE_PARTIAL.fullmatch(final) is None
    assert interpret_native(final).final


event = st.fixed_dictionaries({
    "index": st.integers(0, 3), "content": st.text(max_size=12),
    "tokens": st.lists(st.integers(0, 300_000), max_size=4), "stop": st.just(False),
    "id_slot": st.integers(-1, 64), "tokens_predicted": st.integers(0, 2 * MAX_CTX_TOKENS),
    "tokens_evaluated": st.integers(0, 10_000)})


@settings(max_examples=400, deadline=None)
@given(event, st.booleans())
def test_every_partial_event_reads_as_its_json_says(obj, ascii_only):
    payload = json.dumps(obj, separators=(",", ":"), ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    fast, slow = _both(payload)
    assert fast == slow


@settings(max_examples=600, deadline=None)
@given(st.integers(0, len(TYPICAL) - 1), st.binary(min_size=0, max_size=3), st.integers(0, 3))
def test_a_damaged_event_reads_as_its_json_says(at, inserted, cut):
    payload = TYPICAL[:at] + inserted + TYPICAL[at + cut:]
    fast, slow = _both(payload)
    assert fast == slow


def test_a_long_event_that_fails_late_does_not_hang_the_reader():
    """64 two-byte characters, then a tail the match refuses: with a quantifier nested in another
    that backtracks, that is 2^128 ways to split the content before giving up, which a server could
    send to stop satbench's client. The match must fail at once and hand over to the JSON path (run in
    a child process, so that a regression shows as a timeout, not a hung suite)."""
    code = ("from satbench.http.sse import _NATIVE_PARTIAL; p = b'{\"index\":0,\"content\":\"' + "
            "('\\u00e9' * 64).encode() + b'\",\"tokens\":[1],\"stop\":false,\"id_slot\":-1,"
            "\"tokens_predicted\":5,\"tokens_evaluated\":x}'; print(_NATIVE_PARTIAL.fullmatch(p))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "None", out.stderr
