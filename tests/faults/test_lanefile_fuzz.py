"""The lane-file parser on arbitrary input: a valid RunConfig or one UserError of one line, never
another exception (RecursionError, ValueError, OverflowError, pydantic's own)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from satbench.cli.lanefile import load_lane_file
from satbench.config.schema import RunConfig
from satbench.errors import UserError

KEYS = ['name', 'model', 'runtime', 'url', 'server_bin', 'concurrency', 'prompt_tokens', 'output_tokens',
    'shared_prefix', 'requests_per_level', 'repetitions', 'request_timeout_s', 'slo', 'together',
    'insecure', 'parallel', 'ctx_size', 'port', 'batch_size', 'p95_ttft_ms', 'p95_tpot_ms', 'f1_streams',
    'checks', 'bogus']
VALUES = ['1', '0', '-1', 'true', 'false', '1.5', 'inf', 'nan', '-inf', '1e999', '99999999999999999999999',
    '"x"', '"a"', '""', '[1, 2]', '[true]', '[1.0]', '[]', '[[1]]', '{}',
    '{ p95_ttft_ms = 1, p95_tpot_ms = 2 }', '"embedded"', '"url"', '"native"', '"http://127.0.0.1:1"',
    '1979-05-27T07:32:00Z', '"\\u0000"', '[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[']
HEADERS = ['[[lanes]]', '[lanes.server]', '[lanes.fairness]', '[lanes.slo]', '[server]', '[[lanes.server]]',
    '']

line = st.one_of(
    st.sampled_from(HEADERS),
    st.builds(lambda k, v: f"{k} = {v}", st.sampled_from(KEYS), st.sampled_from(VALUES)),
    st.text(max_size=30),
)
toml_ish = st.lists(line, max_size=25).map("\n".join)


def _check(data: bytes) -> bool:
    """True for a valid config, False for a UserError of one printable line; anything else fails."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "lanes.toml"
        path.write_bytes(data)
        try:
            cfg = load_lane_file(path)
        except UserError as exc:
            message = str(exc)
            assert message and "\n" not in message and "\r" not in message, repr(message)
            assert all(c.isprintable() for c in message), repr(message)
            return False
        assert isinstance(cfg, RunConfig) and cfg.lanes
        return True


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2000))
def test_arbitrary_bytes_are_a_config_or_one_user_error_line(data):
    _check(data)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(toml_ish, st.booleans())
@example('[[lanes]]\nname = "a"\nconcurrency = [1, 2]', True)
def test_toml_ish_text_is_a_config_or_one_user_error_line(text, bom):
    _check(("\ufeff" if bom else "").encode() + text.encode("utf-8", errors="surrogatepass"))


@settings(max_examples=50, deadline=None)
@given(st.integers(min_value=1, max_value=6000), st.sampled_from(["[", "{a = ", "[[", "{ a = ["]))
def test_deep_nesting_is_one_user_error_line(depth, opener):
    closer = {"[": "]", "{a = ": "}", "[[": "]]", "{ a = [": "]}"}[opener]
    _check(f'[[lanes]]\nname = "a"\nslo = {opener * depth}1{closer * depth}\n'.encode())


def test_the_fuzzed_parser_accepts_a_valid_file_with_or_without_a_bom():
    body = '[[lanes]]\nname = "a"\nconcurrency = [1, 4096]\nrequest_timeout_s = 86400\n'
    assert _check(body.encode()) and _check(b"\xef\xbb\xbf" + body.encode())
    assert not _check(body.replace("4096", "4097").encode())
