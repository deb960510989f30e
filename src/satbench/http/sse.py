"""Server-sent events: split a byte stream into `data:` payloads, then read what each says.

Two layers, both pure functions of their input so they can be fuzzed:
- `SseSplitter.feed(bytes)` returns the complete `data` payloads seen so far;
- `interpret_native` / `interpret_openai` / `interpret_openai_chat` turn one payload into a
  `StreamUpdate`.
Anything malformed raises `ParseError` (satbench's own), never a third-party error.
"""

from __future__ import annotations

import json
import json.scanner
import re
from collections.abc import Callable
from dataclasses import dataclass

from satbench.config.limits import (
    MAX_CTX_TOKENS,
    MAX_EVENT_BYTES,
    MAX_SERVER_MS,
    MAX_SLOTS,
    MIN_SERVER_MS,
    checked_int,
    json_answer,
    size_text,
)
from satbench.errors import ParseError

_EOL = re.compile(rb"[\r\n]")
_BLANKS = re.compile(rb"[\r\n]*")
_CR, _LF, _COLON, _SPACE = b"\r\n: "


class SseSplitter:
    """Incremental SSE framing (WHATWG): a line ends at CRLF, a bare LF or a bare CR; events end
    at a blank line; `data:` lines join with \\n.

    Comment lines (starting with ':') and fields other than `data` are ignored. A CR that ends
    one chunk ends its line at once; an LF starting the next chunk is then the rest of that CRLF,
    not a blank line of its own.

    Linear in what it is fed: the unfinished line is kept in a bytearray that grows in place, the
    search for its end resumes where the last feed's search stopped (`_scan`), lines are read by
    index and the consumed part is dropped once per feed. A run of blank lines between events
    (nothing gathered) is skipped in one step. An unfinished line longer than MAX_EVENT_BYTES,
    or an event whose data lines add up to more, is a ParseError.
    """

    def __init__(self) -> None:
        self._buf = bytearray()  # the unfinished line (starts at a line start)
        self._scan = 0  # no line end in _buf[:_scan]
        self._data: list[bytes] = []
        self._data_bytes = 0  # of the event being gathered: at most MAX_EVENT_BYTES
        self._after_cr = False  # the last chunk ended with CR: an LF next completes that CRLF
        self.uncommented_bytes = 0  # of lines other than comments and blank lines: fields, data

    def between_events(self) -> bool:
        """True when nothing of an event is pending: no unfinished line, no data gathered, no CR
        whose LF may follow."""
        return not self._buf and not self._data and not self._after_cr

    def one_event(self, chunk: bytes) -> bytes | None:
        """The payload of `chunk` when it is exactly one event of one `data: ` line ending in
        `\\n\\n` and the splitter is between events, as `feed` would return it (the splitter's
        state is the same after either); else None, and nothing changed."""
        n = len(chunk)
        if (not self.between_events() or n > MAX_EVENT_BYTES
                or not chunk.startswith(b"data: ") or chunk.find(b"\n", 6) != n - 2
                or not chunk.endswith(b"\n\n") or b"\r" in chunk):
            return None
        return chunk[6:-2]

    def feed(self, chunk: bytes) -> list[bytes]:
        one = self.one_event(chunk)  # the common read
        if one is not None:
            return [one]
        skip = 0
        if self._after_cr and chunk:
            self._after_cr = False
            skip = 1 if chunk[:1] == b"\n" else 0
        buf = self._buf
        buf += memoryview(chunk)[skip:]
        out: list[bytes] = []
        start, scan, n = 0, self._scan, len(buf)
        while True:
            if not self._data and scan == start:
                # `[\r\n]*` always matches
                start = scan = _BLANKS.match(buf, start).end()  # type: ignore[union-attr]
            m = _EOL.search(buf, scan)
            if m is None:
                if n - start > MAX_EVENT_BYTES:
                    raise ParseError(f"SSE line longer than {size_text(MAX_EVENT_BYTES)} without a newline")
                break
            end = m.start()
            nxt = end + 1
            if buf[end] == _CR:
                if nxt < n:
                    nxt += buf[nxt] == _LF
                else:
                    self._after_cr = True
            self._line(buf, start, end, out)
            start = scan = nxt
        del buf[:start]
        self._scan = n - start
        return out

    def _line(self, buf: bytearray, start: int, end: int, out: list[bytes]) -> None:
        """One line, buf[start:end] (without its end): a blank line ends an event; `data` gathers."""
        if start != end and buf[start] != _COLON:
            self.uncommented_bytes += end - start + 1
        if start == end:
            if self._data:
                out.append(b"\n".join(self._data))
                self._data, self._data_bytes = [], 0
            return
        if buf[start] == _COLON or not buf.startswith(b"data", start, end):
            return
        field_end = buf.find(b":", start, end)
        if field_end < 0:
            field_end = end
        if field_end != start + 4:  # a field named "data…", not "data"
            return
        value_start = field_end + 1
        if value_start < end and buf[value_start] == _SPACE:
            value_start += 1
        value = bytes(buf[value_start:end]) if value_start < end else b""
        self._data.append(value)
        self._data_bytes += len(value) + 1
        if self._data_bytes > MAX_EVENT_BYTES:
            raise ParseError(f"SSE event larger than {size_text(MAX_EVENT_BYTES)}")

    def uncommented(self) -> int:
        """Bytes fed so far outside comment and blank lines (the unfinished line's too, unless a
        comment): what a keepalive stream (`: keepalive` and blank lines) never sends."""
        pending = len(self._buf) if bytes(self._buf[:1]) not in (b"", b":") else 0
        return self.uncommented_bytes + pending

    def finish(self) -> list[bytes]:
        """Payloads left when the stream closed without a final blank line."""
        rest = self.feed(b"\n\n") if (self._buf or self._data) else []
        self._buf, self._scan = bytearray(), 0
        return rest


@dataclass(slots=True)
class StreamUpdate:
    """What one payload contributes: tokens, and for the final one, the server's summary."""

    n_tokens: int = 0
    tokens_so_far: int | None = None
    exact: bool = True
    final: bool = False
    done_marker: bool = False
    slot_id: int | None = None
    timings: dict | None = None
    usage_completion_tokens: int | None = None
    usage_prompt_tokens: int | None = None
    error: str | None = None
    textless: str | None = None  # what a choice carried in place of text (textless_kind), else None


# the C scanner json.loads ends in, without its wrappers (typeshed types its argument as a scanner)
_SCAN = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]
_JSON_BLANKS = re.compile(r"[ \t\n\r]*")


def _load(payload: bytes) -> dict:
    """The JSON object `payload` holds, as json.loads reads it; else ParseError. A payload that
    opens with `{` is UTF-8 to json.loads (its encoding sniffing looks at the second byte only),
    so it is decoded and scanned directly; anything else goes through json.loads."""
    obj: object = None
    try:
        if payload[:1] == b"{" and payload[1:2] != b"\0":
            text = payload.decode("utf-8", "surrogatepass")
            try:
                obj, end = _SCAN(text, 0)
            except StopIteration:
                raise ValueError("not JSON") from None
            if end != len(text) and (
                    _JSON_BLANKS.match(text, end).end() != len(text)):  # type: ignore[union-attr]
                raise ValueError("extra data after the JSON value")
        else:
            obj = json_answer(payload, "stream event")
    except (ValueError, RecursionError, ParseError) as exc:  # UnicodeDecodeError is a ValueError
        raise ParseError(f"stream event is not JSON: {payload[:80]!r}") from exc
    if not isinstance(obj, dict):
        raise ParseError(f"stream event is not a JSON object: {payload[:80]!r}")
    return obj


def _utf8(text: bytes) -> bool:
    try:
        text.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return False
    return True


def _error_text(obj: dict) -> str | None:
    err = obj.get("error")
    if err is None:
        return None
    if isinstance(err, dict):
        return str(err.get("message") or err.get("type") or err)
    return str(err)


def _int_or_none(value: object, what: str, hi: int = MAX_CTX_TOKENS) -> int | None:
    """None when absent (or a bool, as llama.cpp never sends one here); else an integer in 0..`hi`
    (a token count: 0..MAX_CTX_TOKENS), or ParseError naming `what`."""
    if isinstance(value, bool) or value is None:
        return None
    return checked_int(value, 0, hi, what)


_INT = rb"(?:0|[1-9][0-9]*)"
# llama.cpp's partial /completion event, byte for byte as its server writes it (ordered keys, no
# blanks): a JSON string (no raw control character, only JSON's escapes) and JSON integers. The
# string's quantifiers are possessive: its alternatives never match a quote, so giving nothing back
# changes no match, and a payload that fails late costs linear time, not 2^length
_NATIVE_PARTIAL = re.compile(
    rb'\{"index":' + _INT + rb',"content":"((?:[^"\\\x00-\x1f]++|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*+)",'
    rb'"tokens":\[((?:' + _INT + rb'(?:,' + _INT + rb')*)?)\],"stop":false,"id_slot":-?' + _INT +
    rb',"tokens_predicted":(' + _INT + rb'),"tokens_evaluated":' + _INT + rb'\}')


def interpret_native(payload: bytes) -> StreamUpdate:
    """llama.cpp `/completion` event: `tokens_predicted` (running count), `tokens`, `stop`, `timings`.

    The running count is what counts: when a token ends inside a multi-byte UTF-8 character,
    llama.cpp holds its text back and sends no event for it, so `tokens` (ids of this event
    only) misses it, while the next event's `tokens_predicted` includes it.

    A partial event as llama.cpp writes it (`_NATIVE_PARTIAL`: most of a stream) is read by one
    match instead of a JSON parse, with the same result (tests/http/test_sse_native_fast.py holds
    the two equal); anything else, or a figure out of range, takes the general path.
    """
    m = _NATIVE_PARTIAL.fullmatch(payload)
    so_far = _partial_so_far(m)
    if so_far is not None:
        ids = m[2]  # type: ignore[index]  # a match, as so_far is not None
        return StreamUpdate(n_tokens=ids.count(b",") + 1 if ids else 0, tokens_so_far=so_far)
    return _interpret_native_json(payload)


def native_partial_so_far(payload: bytes) -> int | None:
    """`tokens_predicted` of `payload` when it is a partial event as llama.cpp writes it, read by
    `interpret_native`'s one match (its update then says this count and nothing more that counts: no
    stop, error, timings or usage); None when it is anything else."""
    return _partial_so_far(_NATIVE_PARTIAL.fullmatch(payload))


def _partial_so_far(m: re.Match[bytes] | None) -> int | None:
    """The running count of a `_NATIVE_PARTIAL` match when it is in 0..MAX_CTX_TOKENS and the
    event's text is UTF-8; else None (the JSON path reads the event)."""
    if m is None:
        return None
    so_far, content = int(m[3]), m[1]
    return so_far if so_far <= MAX_CTX_TOKENS and (content.isascii() or _utf8(content)) else None


def _interpret_native_json(payload: bytes) -> StreamUpdate:
    """`interpret_native` by a JSON parse: every event."""
    obj = _load(payload)
    if "error" in obj and (err := _error_text(obj)) is not None:
        return StreamUpdate(error=err)
    tokens = obj.get("tokens")
    so_far = obj.get("tokens_predicted")
    if type(so_far) is not int or not 0 <= so_far <= MAX_CTX_TOKENS:  # else as _int_or_none checks it
        so_far = _int_or_none(so_far, "tokens_predicted")
    if type(tokens) is list:
        n, exact = len(tokens), True
    else:
        n, exact = (1 if obj.get("content") else 0), so_far is not None
    upd = StreamUpdate(n_tokens=n, tokens_so_far=so_far, exact=exact)
    if obj.get("stop") is True:
        upd.final = True
        upd.slot_id = _int_or_none(obj.get("id_slot"), "id_slot", MAX_SLOTS - 1)
        timings = obj.get("timings")
        upd.timings = checked_timings(timings) if isinstance(timings, dict) else None
        upd.usage_completion_tokens = so_far
        upd.usage_prompt_tokens = _int_or_none(obj.get("tokens_evaluated"), "tokens_evaluated")
    return upd


def textless_kind(choice: dict) -> str | None:
    """What an OpenAI-style choice carried in place of countable text: "tool calls", "content arrays"
    (`content` as a list of parts), or "only a role"; None when it held text, or nothing at all. A
    stream whose answer carried only these counts no token (client.StreamClient names the kinds)."""
    delta = choice.get("delta")
    part = delta if isinstance(delta, dict) else choice.get("message")
    if not isinstance(part, dict):
        return None
    if part.get("tool_calls") or part.get("function_call"):
        return "tool calls"
    if isinstance(part.get("content"), list):
        return "content arrays"
    if part.get("role") and not part.get("content") and not part.get("reasoning_content"):
        return "only a role"
    return None


def _completion_tokens(choice: dict) -> int:
    """A `/v1/completions` choice's tokens: 1 when its `text` (or a `delta.content`) is non-empty."""
    text = choice.get("text")
    if text is None and isinstance(choice.get("delta"), dict):
        text = choice["delta"].get("content")
    return 1 if text else 0


def _chat_tokens(choice: dict) -> int:
    """A `/v1/chat/completions` choice's tokens: 1 when its delta holds non-empty `content` or
    `reasoning_content`."""
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        return 0
    texts = (delta.get("content"), delta.get("reasoning_content"))
    return 1 if any(isinstance(t, str) and t for t in texts) else 0


def _openai_chunk(payload: bytes, tokens: Callable[[dict], int]) -> StreamUpdate:
    """One OpenAI-style chunk: [DONE], an error, or `choices[0]` (its tokens by `tokens`, its
    `finish_reason`) with what `usage` and llama.cpp's `timings` say."""
    if payload.strip() == b"[DONE]":
        return StreamUpdate(done_marker=True)
    obj = _load(payload)
    err = _error_text(obj)
    if err is not None:
        return StreamUpdate(error=err)
    upd = StreamUpdate(exact=False)
    choices = obj.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        upd.n_tokens = tokens(choices[0])
        if not upd.n_tokens:
            upd.textless = textless_kind(choices[0])
        if choices[0].get("finish_reason"):
            upd.final = True
    return _with_summary(obj, upd)


def interpret_openai(payload: bytes) -> StreamUpdate:
    """OpenAI `/v1/completions` chunk: `choices[0].text`; `usage` (+ llama.cpp `timings`); [DONE]."""
    return _openai_chunk(payload, _completion_tokens)


def interpret_openai_chat(payload: bytes) -> StreamUpdate:
    """OpenAI `/v1/chat/completions` chunk: `choices[0].delta.content` (or `reasoning_content`, a
    thinking model's tokens, which usage.completion_tokens counts too); `finish_reason`; `usage` (+
    llama.cpp `timings`), in llama.cpp on a last chunk whose `choices` is empty; [DONE].

    A chunk carries a token when its delta holds non-empty text: the opening `{"role": "assistant",
    "content": null}` delta, an empty delta and the finish_reason chunk carry none (they neither
    count nor start TTFT). Counts are inexact until `usage` settles them (client.settle_usage)."""
    return _openai_chunk(payload, _chat_tokens)


def _with_summary(obj: dict, upd: StreamUpdate) -> StreamUpdate:
    """`upd` with what an OpenAI-style chunk's `usage` (the answer is over) and llama.cpp's
    `timings` say."""
    usage = obj.get("usage")
    if isinstance(usage, dict):
        upd.final = True
        upd.usage_completion_tokens = _int_or_none(usage.get("completion_tokens"), "usage.completion_tokens")
        upd.usage_prompt_tokens = _int_or_none(usage.get("prompt_tokens"), "usage.prompt_tokens")
    timings = obj.get("timings")
    if isinstance(timings, dict):
        upd.timings = checked_timings(timings)
    return upd


_TIMING_COUNTS = ("cache_n", "prompt_n", "predicted_n")
_TIMING_MS = ("prompt_ms", "predicted_ms")


def checked_timings(raw: dict) -> dict:
    """llama.cpp's `timings`, only the fields satbench keeps: counts integers in 0..MAX_CTX_TOKENS,
    times finite numbers that are 0 or in MIN_SERVER_MS..MAX_SERVER_MS; a field that is neither is
    left out (unavailable: the level says the server reported no such timing)."""
    out: dict = {}
    for key in _TIMING_COUNTS:
        v = raw.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_CTX_TOKENS:
            out[key] = v
    for key in _TIMING_MS:
        v = raw.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and (
                v == 0 or MIN_SERVER_MS <= v <= MAX_SERVER_MS):
            out[key] = float(v)
    return out
