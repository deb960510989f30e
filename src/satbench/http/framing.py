"""HTTP/1.1 framing of a response, as the streaming transport reads it: the head (`parse_head`,
`content_length`) and `Transfer-Encoding: chunked` (`ChunkedDecoder`). Every malformed frame is a
ParseError naming what was wrong; a size line or a Content-Length is bounded (limits)."""

from __future__ import annotations

import re

from satbench.config.limits import MAX_CHUNK_SIZE_LINE_BYTES, MAX_CONTENT_LENGTH_DIGITS
from satbench.errors import ParseError

_HEX_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}")
_STATUS = re.compile(rb"[1-5][0-9][0-9]")
_DIGITS = re.compile(rb"[0-9]{1,%d}" % MAX_CONTENT_LENGTH_DIGITS)
_CRLF_WINDOW = MAX_CHUNK_SIZE_LINE_BYTES + 2  # a size line and its CRLF


class BadChunk(ParseError):
    """A chunk frame that is not `Transfer-Encoding: chunked`; `decoded` holds the body bytes of the
    same feed that came before it (they were received and count, whatever the read boundaries)."""

    def __init__(self, message: str, decoded: bytes) -> None:
        super().__init__(message)
        self.decoded = decoded


class ChunkedDecoder:
    """Incremental `Transfer-Encoding: chunked` decoder; `feed()` returns body bytes.

    Linear in what it is fed: a feed walks its bytes with an offset and keeps only the undecoded
    tail (at most a partial size line) for the next one. A size line is hex digits (at most 16),
    optionally `;extensions`, in at most MAX_CHUNK_SIZE_LINE_BYTES; else BadChunk (a ParseError)."""

    def __init__(self) -> None:
        self._buf = b""
        self._remaining = -1  # -1: expecting a size line; -2: expecting CRLF after data
        self.done = False

    def between_chunks(self) -> bool:
        """True when the next byte starts a chunk's size line (nothing of a chunk pending, body not over)."""
        return self._remaining == -1 and not self._buf and not self.done

    def whole_chunk(self, data: bytes) -> bytes | None:
        """The data of `data` when it is exactly one whole non-empty chunk (`<hex size>\\r\\n<data>\\r\\n`,
        no extensions) and the decoder is between chunks, as `feed` would return it (the decoder's
        state is the same after either); else None, and nothing changed."""
        if not self.between_chunks():
            return None
        nl = data.find(b"\r\n", 0, _CRLF_WINDOW)
        if nl <= 0 or not _HEX_SIZE.fullmatch(data, 0, nl):
            return None
        end = nl + 2 + int(data[:nl], 16)
        if end == nl + 2 or len(data) != end + 2 or not data.endswith(b"\r\n"):
            return None
        return data[nl + 2 : end]

    def feed(self, data: bytes) -> bytes:
        whole = self.whole_chunk(data)  # the common read
        if whole is not None:
            return whole
        out = bytearray()
        try:
            return self._feed(data, out)
        except ParseError as exc:
            raise BadChunk(str(exc), bytes(out)) from None

    def _feed(self, data: bytes, out: bytearray) -> bytes:
        buf = self._buf + data if self._buf else data
        pos, n = 0, len(buf)
        while not self.done and pos < n:
            if self._remaining == -1:
                after = self._size_line(buf, pos)
                if after == pos:  # not whole yet
                    break
                pos = after
            elif self._remaining == -2:
                if n - pos < 2:
                    break
                if buf[pos : pos + 2] != b"\r\n":
                    raise ParseError("chunk data not followed by CRLF")
                pos += 2
                self._remaining = -1
            else:
                take = min(self._remaining, n - pos)
                out += memoryview(buf)[pos : pos + take]
                pos += take
                self._remaining -= take
                if self._remaining == 0:
                    self._remaining = -2
        self._buf = buf[pos:] if pos < n else b""
        return bytes(out)

    def _size_line(self, buf: bytes, pos: int) -> int:
        """Reads the size line at `pos` (the next chunk's size, or the end: `done`) and returns where
        it ends; `pos` itself when it is not whole yet."""
        nl = buf.find(b"\r\n", pos, pos + _CRLF_WINDOW)
        if nl < 0:
            if len(buf) - pos >= _CRLF_WINDOW:
                raise ParseError(f"chunk size line longer than {MAX_CHUNK_SIZE_LINE_BYTES} bytes")
            return pos
        size_text = buf[pos:nl].split(b";", 1)[0].strip()
        if not _HEX_SIZE.fullmatch(size_text):
            raise ParseError(f"bad chunk size {size_text[:20]!r}")
        size = int(size_text, 16)
        if size == 0:
            self.done = True  # trailers, if any, are ignored
        else:
            self._remaining = size
        return nl + 2


def parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    """Status code (exactly three ASCII digits, 100..599) and lower-cased headers of an HTTP/1.x
    response head (without the blank line); ParseError for anything else."""
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
        raise ParseError(f"not an HTTP/1.x status line: {lines[0][:60]!r}")
    if not _STATUS.fullmatch(parts[1]):
        raise ParseError(f"bad status code {parts[1][:10]!r}")
    status = int(parts[1])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            raise ParseError(f"bad header line {line[:60]!r}")
        headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
    return status, headers


def content_length(value: str) -> int:
    """A Content-Length header's value: ASCII digits only (no sign, `_` or base prefix), at most
    MAX_CONTENT_LENGTH_DIGITS of them; else ParseError."""
    raw = value.encode("latin-1")
    if not _DIGITS.fullmatch(raw):
        raise ParseError(f"bad Content-Length {raw[:20]!r}")
    return int(raw)
