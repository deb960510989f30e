"""What satbench accepts from a server: every size, time and range limit on what it reads, in one place.

A server satbench measures may be misconfigured, behind a broken proxy, or hostile. Every read
from it is bounded in bytes and in time, and every number it reports is checked for type and
range before use. A read past a limit raises `AnswerTooLarge` / `AnswerTimeoutError` (both
`ParseError`s) whose message is one line naming the endpoint and the limit; a number out of
range is a `ParseError` naming the field, its value and the range (`checked_int`), which the
caller records as an unavailable figure with that reason.

The read that applies these limits: `http.access.read` / `read_sync` (preflight, capability, probe,
sampler), which answers them as http.errors.TooLarge / TimedOut with the same message; the streamed
answers: transport.HttpStream.
"""

from __future__ import annotations

import json
import math

from satbench.errors import ParseError

KIB = 1024
MIB = 1024 * KIB

# -- sizes (bytes) -----------------------------------------------------------------------------
MAX_SERVER_ARGS = 64  # words of [lanes.server] args: llama-server flags and their values
MAX_SERVER_ARG_CHARS = 4096  # one such word (a path, a tensor split)
MAX_LENGTHS_FILE_BYTES = 64 * MIB  # a JSONL of request lengths (--prompt-tokens jsonl:PATH)
MAX_LENGTHS_LINES = 1_000_000  # lengths in one such file
MAX_API_KEY_FILE_BYTES = 64 * KIB
"""--api-key-file (lane file: api_key_file): a key is a line of ~100 bytes; a larger file, a device
(/dev/zero) or a named pipe is refused unread (records.rundir.read_regular_file)."""
MAX_CA_CERT_BYTES = 1 * MIB
"""--ca-cert (lane file: ca_cert): a PEM bundle; the system's whole CA bundle is ~220 KiB."""
MAX_EVENTS = 50_000
"""Records of a run's events.jsonl one read holds (requests and level marks): ~2 KB each
(records.compact), so ~100 MB at the cap; a run of 1,400 requests took 30 minutes on 2 cores."""
MAX_SAMPLES = 2_000_000
"""Samples of a run's server_samples.jsonl one read holds (all lanes and kinds), as columns of ~60
bytes a sample (records.samples): ~120 MB at the cap, over 18 hours of sampling at ~10 polls a second
of each of the three kinds."""
MAX_HEADER_BYTES = 64 * KIB
"""A response head (status line + headers): llama-server sends ~300 bytes; proxies add a few KiB."""
MAX_EVENT_BYTES = 8 * MIB
"""One SSE event (a line, or the data lines of one event): a llama.cpp final event with the prompt
text and generation settings stays far below; 8 MiB leaves room for long prompts."""
MAX_ERROR_BODY_BYTES = 8 * KIB
"""The part of a non-200 answer kept for its error message (a JSON error is ~200 bytes)."""
MAX_PROPS_BYTES = 1 * MIB
"""/props: a few KiB (settings and the chat template; the largest templates are ~30 KiB)."""
MAX_HEALTH_BYTES = 64 * KIB
"""/health: {"status":"ok"} (15 bytes) or a short error."""
MAX_MODELS_BYTES = 4 * MIB
"""/v1/models: one entry per model, ~200 bytes each; a gateway listing thousands fits."""
MAX_SLOTS_BYTES = 4 * MIB
"""/slots: one slot's entry is ~3 KiB (its id, n_ctx, params with the sampler settings, next_token;
more with a long grammar or stop list), so 4 MiB holds ~1,000 slots. The sampler reads it 10
times a second: a larger answer would cost ~12 ms of parsing per MiB on every poll."""
MAX_METRICS_BYTES = 1 * MIB
"""/metrics: llama.cpp exposes ~20 series in ~3 KiB."""
MAX_METRIC_NAME_CHARS = 256
"""A /metrics series' name with its label block (`name{a="b"}`): llama.cpp's are ~40 characters,
unlabelled. A longer one is refused (ParseError), so a sample's keys stay short: with
MAX_METRIC_SERIES, a /metrics sample stays under ~100 KiB."""
MAX_METRIC_SERIES = 256
"""`llamacpp:*` series kept from one /metrics answer (llama.cpp has ~20); more is refused, so a
sample written 10 times a second stays small."""
TOKENIZE_BASE_BYTES = 64 * KIB
"""/tokenize: the answer's fixed part ({"tokens":[…]}, with room for special tokens)."""
TOKENIZE_BYTES_PER_TEXT_BYTE = 16
"""/tokenize: a token covers at least one byte of text and prints as at most 11 characters ("2147483647,")."""
STREAM_BASE_BYTES = 1 * MIB
"""A streamed answer's fixed part: head, final event (timings, settings), [DONE]."""
STREAM_BYTES_PER_TOKEN = 4 * KIB
"""A streamed answer, per token asked (prompt + output): one event per output token is ~200 bytes
(an OpenAI chunk with a long model name ~500), and the final native event repeats the prompt's text."""
MAX_CHUNK_SIZE_LINE_BYTES = 64
"""A `Transfer-Encoding: chunked` size line, extensions included, CRLF not: llama-server sends
"1a3" (a few hex digits); a longer line is a ParseError, so extensions cannot pad an answer."""
MAX_CONTENT_LENGTH_DIGITS = 18
"""A Content-Length header: ASCII digits only, at most 18 (below 2**63); else a ParseError."""
MAX_EXTRA_TOKENS = 16
"""Output tokens a streamed answer may count past its request's max_tokens before satbench stops
reading it (error `wrong_token_count`, what arrived up to there kept): llama.cpp with ignore_eos
sends exactly max_tokens, so this is slack, not a tolerance the count check grants."""
MAX_TOOL_OUTPUT_BYTES = 1 * MIB
"""`llama-server --version` / `--list-devices` output: a few lines each. What run.json keeps of it
is cut further: the version line and each device to MAX_SERVER_TEXT_CHARS, at most MAX_DEVICES
devices."""
MAX_DEVICES = 64
"""Devices kept from `llama-server --list-devices` (a node has at most a few GPUs)."""
MAX_STARTUP_LOG_BYTES = 4 * MIB
"""The part of a server's log read for its startup buffer lines (memlog.py), from where that start
began writing: a start logs a few hundred lines (~100 KiB at verbosity 4); more is a server
already at work, and is not read."""
MAX_LOG_LINE_CHARS = 4096
"""One server log line as memlog.py reads it: llama.cpp's buffer lines are ~80 characters; a
longer line is cut to this before any pattern looks at it."""

# -- times (seconds) ---------------------------------------------------------------------------
PROBE_DEADLINE_S = 30.0
"""The whole of one probe read (/props, /v1/models, /health, /tokenize) at a lane's start: a
loaded server answers in milliseconds; a busy one in well under this."""
PREFLIGHT_DEADLINE_S = 10.0
"""The whole of one preflight / capability read: the server is idle then."""
RTT_DEADLINE_S = 5.0
"""One round trip of the RTT measurement (GET /health): a loopback answer takes ~0.1 ms."""

# -- ranges of the figures a server reports ------------------------------------------------------
MAX_SLOTS = 65_536
"""total_slots and /slots ids: llama-server's -np is an int, and no real server has more slots."""
MAX_CTX_TOKENS = 2**24
"""A context (n_ctx, per slot) and any token count (usage, n_decoded, timings): 16 Mi tokens is
beyond any model's training context."""
MAX_TOKEN_ID = 2**31 - 1
"""A token id (/tokenize): llama.cpp's llama_token is int32."""
MAX_METRIC_VALUE = float(2**53)
"""A /metrics value: llama.cpp's series are counts, rates and gauges, never negative; above 2**53
a float no longer holds every integer."""
MAX_SERVER_MS = 1e9
"""A timing in ms (timings.prompt_ms, predicted_ms): ~11 days."""
MIN_SERVER_MS = 1e-3
"""The smallest positive timing in ms kept (1 µs; no prefill or decode is faster): a smaller one
(a denormal such as 1e-300) is left out as unavailable, so that no rate divided by it is inf or
nan; 0 is kept and means unavailable too."""
MAX_SERVER_TEXT_CHARS = 4096
"""A text figure from /props (model_path, model_alias, build_info) kept in run.json."""


class AnswerTooLarge(ParseError):
    """A server's answer was larger than its endpoint's limit (one line: endpoint, limit)."""


class AnswerTimeoutError(ParseError):
    """A server's answer did not arrive, whole, within its deadline (one line: endpoint, seconds)."""


def json_answer(body: bytes | str, where: str) -> object:
    """The JSON value of a server's answer; ParseError naming `where` when it is not JSON (or nests
    deeper than Python's parser can follow)."""
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise ParseError(f"{where}: not JSON" if where else "not JSON") from exc


def size_text(n_bytes: int) -> str:
    """'1 MiB', '64 KiB', '300 bytes': a limit as the refusal names it."""
    for unit, size in (("MiB", MIB), ("KiB", KIB)):
        if n_bytes >= size and n_bytes % size == 0:
            return f"{n_bytes // size} {unit}"
    return f"{n_bytes} bytes"


def too_large(where: str, limit_bytes: int) -> AnswerTooLarge:
    return AnswerTooLarge(f"{where}: answer larger than {size_text(limit_bytes)}; "
                          "not a llama.cpp server answer")


def too_slow(where: str, deadline_s: float) -> AnswerTimeoutError:
    return AnswerTimeoutError(f"{where}: no answer within {deadline_s:g} s")


def tokenize_limit(text_bytes: int) -> int:
    """The most a /tokenize answer for `text_bytes` bytes of text may be."""
    return TOKENIZE_BASE_BYTES + TOKENIZE_BYTES_PER_TEXT_BYTE * max(0, text_bytes)


def stream_limit(prompt_tokens: int, max_tokens: int) -> int:
    """The most a streamed answer may be for a request of that size, counted as the raw bytes
    received (head, chunk framing and body), so that chunk extensions or padding cannot carry an
    unbounded answer past it. Sound with no framing allowance: llama-server frames each ~200-byte
    event as one chunk (~8 bytes of size line and CRLFs), far inside STREAM_BYTES_PER_TOKEN."""
    return STREAM_BASE_BYTES + STREAM_BYTES_PER_TOKEN * (max(0, prompt_tokens) + max(0, max_tokens))


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def checked_int(value: object, lo: int, hi: int, what: str) -> int:
    """`value` when it is a JSON integer (not a bool, not a float, not a string) in lo..hi; else
    ParseError naming `what`, the value and the range."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParseError(f"{what} {_shown(value)} is not an integer")
    if not lo <= value <= hi:
        raise ParseError(f"{what} {_shown(value)} is outside {lo}..{hi}")
    return value


def checked_number(value: object, lo: float, hi: float, what: str) -> float:
    """`value` as a float when it is a finite JSON number (int or float, not a bool) in lo..hi;
    else ParseError naming `what`, the value and the range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ParseError(f"{what} {_shown(value)} is not a number")
    try:
        f = float(value)
    except OverflowError as exc:
        raise ParseError(f"{what} {_shown(value)} is outside {lo:g}..{hi:g}") from exc
    if not math.isfinite(f) or not lo <= f <= hi:
        raise ParseError(f"{what} {_shown(value)} is outside {lo:g}..{hi:g}")
    return f


def optional_int(value: object, lo: int, hi: int, what: str) -> int | None:
    """None for an absent (None) value, else `checked_int`."""
    return None if value is None else checked_int(value, lo, hi, what)


def figure(value: object, lo: int, hi: int, what: str) -> tuple[int | None, str | None]:
    """(the checked integer, None), (None, None) when absent, or (None, why) when out of range or
    not an integer: an unavailable figure with its reason, never an exception."""
    try:
        return optional_int(value, lo, hi, what), None
    except ParseError as exc:
        return None, str(exc)


def text_figure(value: object, what: str) -> tuple[str | None, str | None]:
    """(text, None) for a string up to MAX_SERVER_TEXT_CHARS; (None, None) absent; (None, why) else."""
    if value is None:
        return None, None
    if not isinstance(value, str):
        return None, f"{what} {_shown(value)} is not a string"
    if len(value) > MAX_SERVER_TEXT_CHARS:
        return None, f"{what} is longer than {MAX_SERVER_TEXT_CHARS} characters"
    return value, None
