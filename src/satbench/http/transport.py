"""Minimal HTTP/1.1 streaming transport on asyncio.BufferedProtocol: stamps every byte as it is read.

`buffer_updated` stamps the bytes straight out of `recv_into` (not when a reader task next runs),
and the request's task wakes once, at the end. One connection per request (`Connection: close`).
The transport reads into a buffer the protocol lends (`ReadBuffer`, shareable by the streams of
one event loop), not into a fresh `recv(256 KiB)` bytes object per read: that allocation is
above glibc's mmap threshold, and each read then costs an mmap, a page fault, an mremap and an
munmap (measured: 3x the client's CPU per chunk at 64 streams). `data_received(bytes)` is the
same entry point for callers that hold the bytes themselves.

`HttpStream` parses the status line, headers and body (chunked, Content-Length or
until-close), splits the body into SSE payloads and hands each one, with the stamp of the
`recv` that completed it, to `on_payload` at once. Malformed framing raises `ParseError` inside
the protocol and ends the request; so does a head larger than MAX_HEADER_BYTES and an answer
larger than the exchange's `max_body_bytes` (`AnswerTooLarge`), counted in raw bytes received,
so framing (chunk extensions) cannot carry an unbounded answer.
"""

from __future__ import annotations

import asyncio
import re
import sys
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass

from satbench.config.limits import (
    MAX_ERROR_BODY_BYTES,
    MAX_EVENT_BYTES,
    MAX_HEADER_BYTES,
    size_text,
    too_large,
)
from satbench.errors import ParseError
from satbench.http.framing import BadChunk, ChunkedDecoder, content_length, parse_head
from satbench.http.sse import SseSplitter


@dataclass
class HttpResult:
    """What one exchange produced (the SSE payloads went to `on_payload` as they arrived)."""

    status: int | None = None
    headers_ns: int | None = None
    first_byte_ns: int | None = None
    end_ns: int | None = None
    n_payloads: int = 0
    error_body: bytes = b""
    content_encoding: str | None = None  # the head's Content-Encoding when not identity (a compressed body)
    complete: bool = False
    failure: BaseException | None = None


READ_BUFFER_BYTES = 64 << 10  # one read at most; below glibc's default mmap threshold (128 KiB)
# A read as a streaming server writes each event: one whole chunk (`<hex size>\r\n<data>\r\n`, no
# extension) whose data is one whole SSE event of one `data: ` line (group 2: its payload). It is
# that event only when the size says so (HttpStream._bytes_at checks it).
_CHUNK_EVENT = re.compile(rb"([0-9A-Fa-f]{1,16})\r\ndata: ([^\r\n]*)\n\n\r\n")


class ReadBuffer:
    """The bytes a transport reads into: `view` is lent by `get_buffer` and read back in
    `buffer_updated`, which the transport calls back to back, so one buffer serves every stream
    of one event loop (never two loops at once)."""

    def __init__(self, size_bytes: int = READ_BUFFER_BYTES) -> None:
        self.view = memoryview(bytearray(size_bytes))


class HttpStream(asyncio.BufferedProtocol):
    """One request/response on its own connection. `done` resolves when the exchange is over.

    `max_body_bytes` bounds the raw bytes received (head, chunk framing and body; see
    limits.stream_limit), whatever the status: past it the exchange ends with `AnswerTooLarge`
    naming `where` (the endpoint's URL) and the limit. `read_buffer`: where the transport reads
    (one of its own when not given)."""

    def __init__(self, clock: Callable[[], int], on_payload: Callable[[int, bytes], None],
                 max_body_bytes: int | None = None, where: str = "the server",
                 read_buffer: ReadBuffer | None = None) -> None:
        self._view = (read_buffer or ReadBuffer()).view
        self.clock = clock
        self.on_payload = on_payload
        self.max_body_bytes, self.where = max_body_bytes, where
        self._cap_bytes = max_body_bytes if max_body_bytes is not None else sys.maxsize  # None: no limit
        self.result = HttpResult()
        self.done: asyncio.Future[HttpResult] = asyncio.get_running_loop().create_future()
        self.last_data_ns = 0
        self.transport: asyncio.Transport | None = None
        self._head = bytearray()
        self._chunked: ChunkedDecoder | None = None
        self._length: int | None = None
        self._received = 0  # raw bytes: head, framing and body
        self._body_bytes = 0  # decoded body bytes
        self._sse = SseSplitter()
        self._streaming: ChunkedDecoder | None = None  # a 200 chunked body under way: its decoder
        # a 200 chunked body between chunks and between events: a read may take the one-match path
        self._fast = False

    @property
    def received_bytes(self) -> int:
        """Raw bytes received so far (head, framing and body): what the liveness watchdog names."""
        return self._received

    @property
    def uncommented_bytes(self) -> int:
        """Body bytes received so far outside SSE comment lines (the watchdog's "SSE comments only")."""
        return self._sse.uncommented()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream transport, as create_connection makes
        self.transport = transport  # type: ignore[assignment]

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._view

    def buffer_updated(self, nbytes: int) -> None:
        self._bytes_at(self.clock(), self._view, nbytes)

    def data_received(self, data: bytes) -> None:
        self._bytes_at(self.clock(), data, len(data))

    def _bytes_at(self, t: int, buf: bytes | memoryview, nbytes: int) -> None:
        """`buf[:nbytes]`, read from the socket at `t`.

        The common read of a streamed answer, one whole chunk holding one whole event of one `data: `
        line (`_CHUNK_EVENT`) while the body is between chunks and events (`_fast`), is read by one
        match straight out of `buf`: what the general path (_read_at) would do with it (the same
        payload, counts and state after), without its steps or a copy of the read."""
        self.last_data_ns = t
        if self._fast:
            m = _CHUNK_EVENT.fullmatch(buf, 0, nbytes)
            if m is not None:
                body_bytes = nbytes - m.end(1) - 4  # the chunk's data: the read less its framing
                if (int(m[1], 16) == body_bytes and body_bytes <= MAX_EVENT_BYTES
                        and self._received + nbytes <= self._cap_bytes):
                    self._received += nbytes
                    self._body_bytes += body_bytes
                    self.result.n_payloads += 1
                    try:
                        self.on_payload(t, m[2])
                    except ParseError as exc:
                        self._finish(t, exc)
                    return
        self._read_at(t, bytes(buf[:nbytes]))

    def _read_at(self, t: int, data: bytes) -> None:
        """`data`, read at `t`, by the general path (the limit, the head, then the body's framing);
        then whether the next read may take the one-match path (`_fast`)."""
        self._general_read_at(t, data)
        streaming = self._streaming
        self._fast = (streaming is not None and streaming.between_chunks() and self._sse.between_events()
                      and not self.done.done())

    def _general_read_at(self, t: int, data: bytes) -> None:
        r = self.result
        if r.first_byte_ns is None:
            r.first_byte_ns = t
        if self.done.done():
            return
        try:
            self._received += len(data)
            if self._received > self._cap_bytes:
                raise too_large(self.where, self._cap_bytes)
            if r.status is None:
                rest = self._head_at(t, data)
                if rest is None:
                    return
                data = rest
            self._body(t, data)
        except ParseError as exc:
            self._finish(t, exc)

    def _head_at(self, t: int, data: bytes) -> bytes | None:
        """`data` of the response head, read at `t`: once the head is whole, its status, headers and
        framing are taken and the bytes after it returned; None while it is not (ParseError past
        MAX_HEADER_BYTES)."""
        r = self.result
        seen = len(self._head)
        self._head += data
        end = self._head.find(b"\r\n\r\n", max(0, seen - 3))  # resumes where the last search ended
        if end < 0:
            if len(self._head) > MAX_HEADER_BYTES:
                raise ParseError(f"{self.where}: response headers larger than {size_text(MAX_HEADER_BYTES)}")
            return None
        r.status, headers = parse_head(bytes(self._head[:end]))
        r.headers_ns = t
        rest, self._head = bytes(self._head[end + 4 :]), bytearray()
        if (coding := headers.get("content-encoding", "").strip()).lower() not in ("", "identity"):
            r.content_encoding = coding
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._chunked = ChunkedDecoder()
            self._streaming = self._chunked if r.status == 200 else None
        elif "content-length" in headers:
            self._length = content_length(headers["content-length"])
        return rest

    def _body(self, t: int, data: bytes) -> None:
        if self._chunked is not None:
            try:
                data = self._chunked.feed(data)
            except BadChunk as exc:
                self._take(t, exc.decoded)  # what came before the bad frame is the stream's too
                raise
        elif self._length is not None:
            data = data[: max(0, self._length - self._body_bytes)]
        self._take(t, data)
        ended = (self._chunked is not None and self._chunked.done) or (
            self._length is not None and self._body_bytes >= self._length)
        if ended:
            self.result.complete = True
            self._finish(t, None)

    def _take(self, t: int, data: bytes) -> None:
        """Body bytes received at `t`: SSE payloads delivered (a 200), else kept as the error body."""
        self._body_bytes += len(data)
        r = self.result
        if data:
            if r.status == 200:
                self._deliver(t, self._sse.feed(data))
            elif len(r.error_body) < MAX_ERROR_BODY_BYTES:
                r.error_body += data[: MAX_ERROR_BODY_BYTES - len(r.error_body)]

    def connection_lost(self, exc: Exception | None) -> None:
        t = self.clock()
        r = self.result
        if not self.done.done() and r.status is not None and self._chunked is None and self._length is None:
            r.complete = True  # body delimited by the close
        self._finish(t, exc if not r.complete else None)

    def _finish(self, t: int, failure: BaseException | None) -> None:
        if self.done.done():
            return
        self._streaming, self._fast = None, False
        r = self.result
        if r.status == 200 and failure is None:
            try:
                self._deliver(t, self._sse.finish())
            except ParseError as exc:
                failure = exc
        r.end_ns = t
        r.failure = failure
        self.done.set_result(r)
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def _deliver(self, t: int, payloads: list[bytes]) -> None:
        for p in payloads:
            self.result.n_payloads += 1
            self.on_payload(t, p)

    def abort(self, failure: BaseException) -> None:
        self._finish(self.clock(), failure)


class StreamTimeout(Exception):
    """No byte for the read timeout, or the whole request past its deadline (Watchdog)."""


class Watchdog:
    """Ends an exchange (`proto.abort` with StreamTimeout) after `read_ns` without a byte or `total_ns`
    since `start_ns`; checks once a second at most (not per chunk)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, proto: HttpStream, start_ns: int,
                 read_ns: int, total_ns: int) -> None:
        self.loop, self.proto = loop, proto
        self.start_ns, self.read_ns, self.total_ns = start_ns, read_ns, total_ns
        self.period_s = min(1.0, read_ns / 1e9 / 4, total_ns / 1e9 / 4)
        self.handle = loop.call_later(self.period_s, self.check)

    def check(self) -> None:
        now = self.proto.clock()
        if now - self.start_ns > self.total_ns:
            self.proto.abort(StreamTimeout(f"request took longer than {self.total_ns / 1e9:.0f} s"))
        elif now - max(self.proto.last_data_ns, self.start_ns) > self.read_ns:
            self.proto.abort(StreamTimeout(f"no byte from the server for {self.read_ns / 1e9:.0f} s"))
        else:
            self.handle = self.loop.call_later(self.period_s, self.check)

    def cancel(self) -> None:
        self.handle.cancel()


def request_bytes(url: urllib.parse.SplitResult, path: str, body: bytes, headers: dict[str, str]) -> bytes:
    host = url.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    if url.port:
        host += f":{url.port}"
    lines = [f"POST {url.path.rstrip('/')}{path} HTTP/1.1", f"Host: {host}",
             "Content-Type: application/json", f"Content-Length: {len(body)}",
             "Accept: text/event-stream", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
