"""Server-sent events: split a byte stream into `data:` payloads, then read what each says.

Two layers, both pure functions of their input so they can be fuzzed:
- `SseSplitter.feed(bytes)` returns the complete `data` payloads seen so far;
- `interpret_native` / `interpret_openai` turn one payload into a `StreamUpdate`.
Anything malformed raises `ParseError` (satbench's own), never a third-party error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from satbench.errors import ParseError
from satbench.limits import (MAX_CTX_TOKENS, MAX_EVENT_BYTES, MAX_SERVER_MS, MAX_SLOTS, checked_int,
                             json_answer, size_text)

_EOL = re.compile(rb"[\r\n]")


class SseSplitter:
    """Incremental SSE framing (WHATWG): a line ends at CRLF, a bare LF or a bare CR; events end
    at a blank line; `data:` lines join with \\n.

    Comment lines (starting with ':') and fields other than `data` are ignored. A CR that ends
    one chunk ends its line at once; an LF starting the next chunk is then the rest of that CRLF,
    not a blank line of its own.
    """

    def __init__(self) -> None:
        self._buf = b""
        self._data: list[bytes] = []
        self._data_bytes = 0  # of the event being gathered: at most MAX_EVENT_BYTES
        self._after_cr = False  # the last chunk ended with CR: an LF next completes that CRLF

    def feed(self, chunk: bytes) -> list[bytes]:
        if self._after_cr and chunk:
            self._after_cr = False
            if chunk.startswith(b"\n"):
                chunk = chunk[1:]
        self._buf += chunk
        out: list[bytes] = []
        while True:
            end = _line_end(self._buf)
            if end < 0:
                if len(self._buf) > MAX_EVENT_BYTES:
                    raise ParseError(f"SSE line longer than {size_text(MAX_EVENT_BYTES)} without a newline")
                return out
            line = self._buf[:end]
            if self._buf[end : end + 2] == b"\r\n":
                end += 1
            elif end + 1 == len(self._buf) and self._buf[end:] == b"\r":
                self._after_cr = True
            self._buf = self._buf[end + 1 :]
            if not line:
                if self._data:
                    out.append(b"\n".join(self._data))
                    self._data, self._data_bytes = [], 0
                continue
            if line.startswith(b":"):
                continue
            field, _, value = line.partition(b":")
            if field == b"data":
                self._data.append(value[1:] if value.startswith(b" ") else value)
                self._data_bytes += len(self._data[-1]) + 1
                if self._data_bytes > MAX_EVENT_BYTES:
                    raise ParseError(f"SSE event larger than {size_text(MAX_EVENT_BYTES)}")

    def finish(self) -> list[bytes]:
        """Payloads left when the stream closed without a final blank line."""
        rest = self.feed(b"\n\n") if (self._buf or self._data) else []
        self._buf = b""
        return rest


def _line_end(buf: bytes) -> int:
    """Index of the first CR or LF in `buf`, or -1 (a scan that stops there, not at the end of `buf`)."""
    m = _EOL.search(buf)
    return m.start() if m else -1


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


def _load(payload: bytes) -> dict:
    try:
        obj = json_answer(payload, "stream event")
    except ParseError as exc:
        raise ParseError(f"stream event is not JSON: {payload[:80]!r}") from exc
    if not isinstance(obj, dict):
        raise ParseError(f"stream event is not a JSON object: {payload[:80]!r}")
    return obj


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


def interpret_native(payload: bytes) -> StreamUpdate:
    """llama.cpp `/completion` event: `tokens_predicted` (running count), `tokens`, `stop`, `timings`.

    The running count is what counts: when a token ends inside a multi-byte UTF-8 character,
    llama.cpp holds its text back and sends no event for it, so `tokens` (ids of this event
    only) misses it, while the next event's `tokens_predicted` includes it.
    """
    obj = _load(payload)
    err = _error_text(obj)
    if err is not None:
        return StreamUpdate(error=err)
    tokens = obj.get("tokens")
    so_far = _int_or_none(obj.get("tokens_predicted"), "tokens_predicted")
    if isinstance(tokens, list):
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


def interpret_openai(payload: bytes) -> StreamUpdate:
    """OpenAI `/v1/completions` chunk: `choices[0].text`; `usage` (+ llama.cpp `timings`); [DONE]."""
    if payload.strip() == b"[DONE]":
        return StreamUpdate(done_marker=True)
    obj = _load(payload)
    err = _error_text(obj)
    if err is not None:
        return StreamUpdate(error=err)
    upd = StreamUpdate(exact=False)
    choices = obj.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        text = choices[0].get("text")
        if text is None and isinstance(choices[0].get("delta"), dict):
            text = choices[0]["delta"].get("content")
        upd.n_tokens = 1 if text else 0
        if choices[0].get("finish_reason"):
            upd.final = True
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
    times finite numbers in 0..MAX_SERVER_MS; a field that is neither is left out (unavailable:
    the level says the server reported no such timing)."""
    out: dict = {}
    for key in _TIMING_COUNTS:
        v = raw.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_CTX_TOKENS:
            out[key] = v
    for key in _TIMING_MS:
        v = raw.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= MAX_SERVER_MS:
            out[key] = float(v)
    return out
