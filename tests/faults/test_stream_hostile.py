"""A hostile streamed answer costs bounded CPU, memory and bytes, and fails as data of its own type.

The work of reading a stream is linear in its bytes: counted (usage spreads, bytes scanned and
copied), never timed. Each hostile stream then goes through the real StreamClient from a raw TCP
server that counts what it handed to the kernel."""

from __future__ import annotations

import asyncio
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from satbench.config import limits
from satbench.errors import ParseError
from satbench.http import client as client_mod
from satbench.http import sse
from satbench.http.client import (
    ANSWER_TOO_LARGE,
    CompletionRequest,
    StreamClient,
    StreamOutcome,
    _PayloadReader,
)
from satbench.http.endpoint import Endpoint
from satbench.http.sse import SseSplitter, checked_timings
from satbench.http.transport import ChunkedDecoder, HttpStream, content_length, parse_head
from tests.fakes.raw_server import RawServer

SOCKET_SLACK = 24 * limits.MIB  # kernel send + receive buffers on loopback, both sides
SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
CHUNKED_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
                b"Connection: close\r\n\r\n")


def req(max_tokens: int = 4) -> CompletionRequest:
    return CompletionRequest(request_id="r1", prompt="hi", prompt_tokens=1, max_tokens=max_tokens)


class Canned(RawServer):
    """Answers every request with `head`, then `piece` repeated `times` times (None: until the client
    goes), then `tail`; counts the bytes written."""

    def __init__(self, head: bytes, piece: bytes = b"", times: int | None = None, tail: bytes = b"") -> None:
        self.head, self.piece, self.times, self.tail = head, piece, times, tail
        self.sent = 0

    async def handle(self, reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        try:
            writer.write(self.head)
            self.sent += len(self.head)
            if self.times is not None:
                await self._send(writer, self.piece * self.times)
            else:
                block = self.piece * (65536 // len(self.piece) + 1)
                while self.sent < 2**31:
                    await self._send(writer, block)
            writer.write(self.tail)
            self.sent += len(self.tail)
            await writer.drain()
        except (ConnectionError, OSError):
            pass
        writer.close()

    async def _send(self, writer, data: bytes) -> None:
        writer.write(data)
        self.sent += len(data)
        await writer.drain()


async def fetch(srv: Canned, api: str = "native", max_tokens: int = 4) -> StreamOutcome:
    async with srv:
        return await StreamClient(Endpoint.of(srv.url), api, request_timeout_s=60).run(req(max_tokens))


def one_line(out: StreamOutcome) -> str:
    assert out.error_message and "\n" not in out.error_message and "Traceback" not in out.error_message
    return out.error_message


# -- 1. usage events are spread once per answer --------------------------------------------------

def _direct(api: str, wire: bytes, max_tokens: int) -> StreamOutcome:
    """`wire` through HttpStream and the payload reader, without a socket."""
    async def go() -> StreamOutcome:
        client = StreamClient(Endpoint.of("http://127.0.0.1:9"), api)  # type: ignore[arg-type]
        out = StreamOutcome()
        reader = _PayloadReader(client, out, max_tokens=max_tokens)
        clock = iter(range(1, 10**9)).__next__
        proto = HttpStream(clock, reader.feed, max_body_bytes=limits.stream_limit(1, max_tokens))
        reader.stop = proto.abort
        for i in range(0, len(wire), 1024):
            proto.data_received(wire[i : i + 1024])
        proto.connection_lost(None)
        result = await proto.done
        out.finished = reader.finished
        client._read_result(req(max_tokens), result, out)
        return out
    return asyncio.run(go())


def test_alternating_text_and_usage_events_spread_the_usage_once(monkeypatch):
    calls = []
    real = client_mod.spread_over_chunks
    monkeypatch.setattr(client_mod, "spread_over_chunks", lambda c, t: calls.append(len(c)) or real(c, t))
    n = 300
    pair = b'data: {"choices":[{"text":"a"}]}\n\ndata: {"usage":{"completion_tokens":%d}}\n\n'
    events = b"".join(pair % (i + 1) for i in range(n))
    out = _direct("openai", SSE_HEAD + events + b"data: [DONE]\n\n", max_tokens=n)
    assert calls == [n]  # once, over every chunk; not once per usage event
    assert out.error_type is None and out.output_tokens == n and out.token_count_exact
    assert sum(k for _, k in out.chunks) == n


def test_a_single_final_usage_is_spread_as_before():
    events = b"".join(b'data: {"choices":[{"text":"abcd"}]}\n\n' for _ in range(4))
    wire = SSE_HEAD + events + b'data: {"choices":[],"usage":{"completion_tokens":16}}\n\ndata: [DONE]\n\n'
    out = _direct("openai", wire, max_tokens=16)
    assert out.error_type is None and out.output_tokens == 16 and out.token_count_exact
    assert [k for _, k in out.chunks] == [4, 4, 4, 4]


def test_chunks_after_the_usage_event_leave_the_count_inexact():
    wire = (SSE_HEAD + b'data: {"choices":[{"text":"a"}]}\n\ndata: {"usage":{"completion_tokens":3}}\n\n'
            b'data: {"choices":[{"text":"b"}]}\n\ndata: [DONE]\n\n')
    out = _direct("openai", wire, max_tokens=4)
    assert [k for _, k in out.chunks] == [3, 1] and out.output_tokens == 4 and not out.token_count_exact


# -- 2. the SSE splitter scans each byte a bounded number of times -----------------------------

class CountingPattern:
    """Stands in for sse._EOL / sse._BLANKS: counts the bytes each search may look at."""

    def __init__(self, pattern) -> None:
        self.pattern, self.scanned, self.calls = pattern, 0, 0

    def search(self, buf, pos=0):
        self.calls += 1
        m = self.pattern.search(buf, pos)
        self.scanned += (m.end() if m else len(buf)) - pos
        return m

    def match(self, buf, pos=0):
        self.calls += 1
        m = self.pattern.match(buf, pos)
        self.scanned += m.end() - pos + 1
        return m


@pytest.fixture
def counted(monkeypatch):
    eol, blanks = CountingPattern(sse._EOL), CountingPattern(getattr(sse, "_BLANKS", sse._EOL))
    monkeypatch.setattr(sse, "_EOL", eol)
    monkeypatch.setattr(sse, "_BLANKS", blanks, raising=False)
    return eol, blanks


def test_a_long_line_fed_in_small_pieces_is_scanned_once(counted):
    eol, blanks = counted
    s = SseSplitter()
    total = 3 * limits.MIB
    pieces = [b"data: " + b"x" * 1018] + [b"x" * 1024] * (total // 1024 - 1)
    for p in pieces:
        assert s.feed(p) == []
    assert len(s._buf) == total
    assert eol.scanned + blanks.scanned <= 2 * total  # the old splitter scanned ~total²/2 KiB-steps
    assert s.feed(b"\n\n") == [b"x" * (total - 6)]


def test_a_flood_of_blank_lines_costs_one_search_per_feed(counted):
    eol, blanks = counted
    s = SseSplitter()
    for _ in range(32):
        assert s.feed(b"\n" * (256 * limits.KIB)) == []
    assert eol.calls <= 32 and blanks.calls <= 32
    assert eol.scanned + blanks.scanned <= 2 * 32 * 256 * limits.KIB + 64
    assert s.feed(b"data: a\n\n\n\ndata: b\n\n") == [b"a", b"b"]


def test_the_longest_unfinished_line_is_still_refused():
    s = SseSplitter()
    s.feed(b"data: " + b"x" * (limits.MAX_EVENT_BYTES - 6))
    with pytest.raises(ParseError, match="SSE line longer than 8 MiB without a newline"):
        s.feed(b"xx")


class OldSplitter:
    """The splitter as it was (quadratic, but plainly right): the reference for the new one."""

    def __init__(self) -> None:
        self._buf, self._data, self._after_cr = b"", [], False

    def feed(self, chunk: bytes) -> list[bytes]:
        if self._after_cr and chunk:
            self._after_cr = False
            if chunk.startswith(b"\n"):
                chunk = chunk[1:]
        self._buf += chunk
        out = []
        while True:
            m = sse._EOL.search(self._buf)
            if not m:
                return out
            end = m.start()
            line = self._buf[:end]
            if self._buf[end : end + 2] == b"\r\n":
                end += 1
            elif end + 1 == len(self._buf) and self._buf[end:] == b"\r":
                self._after_cr = True
            self._buf = self._buf[end + 1 :]
            if not line:
                if self._data:
                    out.append(b"\n".join(self._data))
                    self._data = []
                continue
            if line.startswith(b":"):
                continue
            field, _, value = line.partition(b":")
            if field == b"data":
                self._data.append(value[1:] if value.startswith(b" ") else value)

    def finish(self) -> list[bytes]:
        return self.feed(b"\n\n") if (self._buf or self._data) else []


SSE_PARTS = st.sampled_from([b"data: ", b"data:", b"data", b"dat", b"datax: y", b": c", b"event: e", b"a",
                             b"\r", b"\n", b"\r\n", b"\n\n", b" ", b":", b"{}"])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(SSE_PARTS, max_size=8).map(b"".join), max_size=12))
def test_the_splitter_reads_what_the_reference_reads(pieces):
    new, old = SseSplitter(), OldSplitter()
    got = [p for piece in pieces for p in new.feed(piece)] + new.finish()
    want = [p for piece in pieces for p in old.feed(piece)] + old.finish()
    assert got == want


# -- 3. the chunked decoder copies each byte a bounded number of times --------------------------

class CountingBytes(bytes):
    """A wire whose slices and searches are counted (the decoder walks it with offsets)."""

    copied = 0
    searched = 0

    def __getitem__(self, key):
        part = bytes.__getitem__(self, key)
        if isinstance(key, slice):
            CountingBytes.copied += len(part)
        return part

    def find(self, sub, start=0, end=None):
        stop = len(self) if end is None else min(end, len(self))
        CountingBytes.searched += max(0, stop - start)
        return bytes.find(self, sub, start, stop)


def test_tiny_chunks_are_decoded_with_bounded_copies_and_searches():
    n = 256 * limits.KIB // 6
    wire = CountingBytes(b"1\r\n:\r\n" * n + b"0\r\n\r\n")
    CountingBytes.copied = CountingBytes.searched = 0
    d = ChunkedDecoder()
    body = d.feed(wire)
    assert d.done and body == b":" * n
    assert CountingBytes.copied <= 2 * len(wire)  # the old decoder re-sliced the rest after every chunk
    assert CountingBytes.searched <= (n + 1) * (limits.MAX_CHUNK_SIZE_LINE_BYTES + 2)  # a bounded window each
    assert len(d._buf) <= 2  # the trailer's CRLF, ignored


def test_a_mebibyte_of_one_byte_chunks_decodes_in_linear_time():
    """A backstop for the count above (which sees only the wire's own slices): 1 MiB of 1-byte
    chunks costs ~0.5 s of CPU when linear, minutes when each chunk re-slices the rest."""
    n = limits.MIB // 6
    t0 = time.process_time()
    d = ChunkedDecoder()
    assert d.feed(b"1\r\n:\r\n" * n + b"0\r\n\r\n") == b":" * n and d.done
    assert time.process_time() - t0 < 20.0


def test_the_decoder_keeps_only_a_partial_size_line_between_feeds():
    wire = b"".join(b"%x\r\n%s\r\n" % (n, b"y" * n) for n in range(1, 200)) + b"0\r\n\r\n"
    d, body = ChunkedDecoder(), b""
    for i in range(0, len(wire), 7):
        body += d.feed(wire[i : i + 7])
        assert len(d._buf) <= limits.MAX_CHUNK_SIZE_LINE_BYTES + 1
    assert d.done and body == b"".join(b"y" * n for n in range(1, 200))


@pytest.mark.parametrize("line", [b"1;" + b"e" * 63, b"+1", b"0x1", b"1_0", b"-1", b" ", b"g"])
def test_bad_chunk_size_lines_are_parse_errors(line):
    with pytest.raises(ParseError):
        ChunkedDecoder().feed(line + b"\r\nx\r\n0\r\n\r\n")


def test_a_size_line_with_extensions_up_to_the_limit_is_read():
    line = b"1;" + b"e" * (limits.MAX_CHUNK_SIZE_LINE_BYTES - 2)
    d = ChunkedDecoder()
    assert d.feed(line + b"\r\nx\r\n0\r\n\r\n") == b"x" and d.done


# -- 4. framing counts against the answer's limit -------------------------------------------------

async def test_padding_chunk_extensions_cannot_carry_an_unbounded_answer():
    piece = b"1;" + b"e" * (limits.MAX_CHUNK_SIZE_LINE_BYTES - 2) + b"\r\n\n\r\n"  # 69 bytes: 1 decoded
    srv = Canned(CHUNKED_HEAD, piece)
    out = await fetch(srv, max_tokens=1)
    limit = limits.stream_limit(1, 1)
    assert out.error_type == ANSWER_TOO_LARGE
    assert one_line(out) == f"{srv.url}/completion: answer larger than {limits.size_text(limit)}; " \
                            "not a llama.cpp server answer"
    assert srv.sent < limit + SOCKET_SLACK  # before: ~69 × limit crossed the wire


async def test_a_too_long_chunk_size_line_fails_the_request_as_a_malformed_stream():
    out = await fetch(Canned(CHUNKED_HEAD, b"1;" + b"e" * 200 + b"\r\n\n\r\n", times=10))
    assert out.error_type == "malformed_stream"
    assert one_line(out) == "chunk size line longer than 64 bytes"


# -- 5. an answer longer than asked is cut --------------------------------------------------------

@pytest.mark.parametrize("api, event", [("native", b'data: {"content":"a"}\n\n'),
                                        ("openai", b'data: {"choices":[{"text":"a"}]}\n\n')])
async def test_an_answer_that_never_stops_is_cut_past_max_tokens(api, event):
    srv = Canned(SSE_HEAD, event)
    out = await fetch(srv, api, max_tokens=4)
    cap = 4 + limits.MAX_EXTRA_TOKENS
    assert out.error_type == "wrong_token_count"
    assert one_line(out) == f"asked for 4 tokens, received {cap + 1} (more than 4 + 16); " \
                            "stopped reading the answer there"
    assert len(out.chunks) == cap + 1 and out.output_tokens == cap + 1  # what arrived up to the cap
    assert srv.sent < SOCKET_SLACK  # before: up to the 1 MiB answer limit, 180,000 chunks at 256 tokens


async def test_a_native_count_jumping_past_max_tokens_is_cut():
    body = b'data: {"tokens":[1],"tokens_predicted":1}\n\ndata: {"tokens":[1],"tokens_predicted":999}\n\n'
    out = await fetch(Canned(SSE_HEAD, body, times=1), max_tokens=4)
    assert out.error_type == "wrong_token_count" and out.output_tokens == 999
    assert [n for _, n in out.chunks] == [1, 998]


async def test_a_few_extra_tokens_are_still_the_ordinary_count_check():
    body = b"".join(b'data: {"tokens":[1],"tokens_predicted":%d}\n\n' % (i + 1) for i in range(6))
    out = await fetch(Canned(SSE_HEAD, body, times=1, tail=b'data: {"stop":true,"tokens_predicted":6}\n\n'))
    assert out.error_type == "wrong_token_count"
    assert one_line(out) == "asked for 4 tokens, received 6"


# -- 6. the status and Content-Length are checked -------------------------------------------------

@pytest.mark.parametrize("status", [b"9" * 4000, b"600", b"099", b"+20", b"2_0", b"20", b"2000",
                                    "٢٠٠".encode()])
async def test_an_absurd_status_fails_the_request_as_a_malformed_stream(status):
    out = await fetch(Canned(b"HTTP/1.1 " + status + b" OK\r\nConnection: close\r\n\r\n", b"x", times=3))
    assert out.error_type == "malformed_stream" and out.http_status is None
    assert one_line(out) == f"bad status code {status[:10]!r}"


@pytest.mark.parametrize("value", [b"-5", b"+5", b"0x5", b"1_0", b"5 5", b"", b"9" * 19, b"\xd9\xa5"])
async def test_a_bad_content_length_fails_the_request_as_a_malformed_stream(value):
    head = b"HTTP/1.1 200 OK\r\nContent-Length: " + value + b"\r\nConnection: close\r\n\r\n"
    out = await fetch(Canned(head, b'data: {"content":"a"}\n\n', times=3))
    assert out.error_type == "malformed_stream"
    assert one_line(out).startswith("bad Content-Length ")


def test_status_and_content_length_accept_the_ordinary():
    assert parse_head(b"HTTP/1.1 599 X")[0] == 599 and parse_head(b"HTTP/1.0 100 Continue")[0] == 100
    assert content_length("0") == 0 and content_length("9" * limits.MAX_CONTENT_LENGTH_DIGITS) > 0


# -- 7. a denormal timing is unavailable ----------------------------------------------------------

@pytest.mark.parametrize("ms, kept", [(1e-300, None), (5e-324, None), (limits.MIN_SERVER_MS / 2, None),
                                      (0, 0.0), (limits.MIN_SERVER_MS, limits.MIN_SERVER_MS), (12.5, 12.5)])
def test_a_timing_below_a_microsecond_is_left_out(ms, kept):
    assert checked_timings({"prompt_ms": ms, "predicted_ms": ms}).get("prompt_ms") == kept


async def test_a_denormal_prompt_ms_reaches_the_outcome_as_unavailable():
    tokens = b"".join(b'data: {"tokens":[1],"tokens_predicted":%d}\n\n' % (i + 1) for i in range(4))
    final = (b'data: {"stop":true,"tokens_predicted":4,"timings":{"prompt_n":1,"prompt_ms":1e-300,'
             b'"predicted_n":4,"predicted_ms":8.0}}\n\n')
    out = await fetch(Canned(SSE_HEAD, tokens, times=1, tail=final))
    assert out.error_type is None and out.output_tokens == 4
    assert out.timings == {"prompt_n": 1, "predicted_n": 4, "predicted_ms": 8.0}
