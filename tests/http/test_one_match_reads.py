"""The one-match reads of a streamed answer give what the general paths give.

- transport: a read that is one whole chunk holding one whole `data: ` event is read by one match
  (`HttpStream._fast`); fed the same reads, a stream that never takes that path yields the same
  payloads, stamps, counts and ending, for any mix of chunks, including the ones it must refuse;
- client: a llama.cpp partial event adds its tokens without an update (`native_partial_so_far`);
  a reader that parses every event into an update ends with the same outcome.
"""

from __future__ import annotations

import asyncio
import itertools
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from satbench.http.client import StreamClient, StreamOutcome, _PayloadReader
from satbench.http.endpoint import Endpoint
from satbench.http.sse import interpret_native, native_partial_so_far
from satbench.http.transport import HttpStream

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def partial(k: int, text: str = " tok") -> bytes:
    obj = {"index": 0, "content": text, "tokens": [100 + k], "stop": False, "id_slot": -1,
           "tokens_predicted": k, "tokens_evaluated": 16}
    return json.dumps(obj, separators=(",", ":")).encode()


def frame(body: bytes, size: int | None = None) -> bytes:
    return b"%x\r\n%s\r\n" % (len(body) if size is None else size, body)


class _General(HttpStream):
    """The reference: every read by the general path."""

    def _bytes_at(self, t, buf, nbytes):
        self._fast = False
        super()._bytes_at(t, buf, nbytes)


def run_reads(cls: type[HttpStream], reads: list[bytes], cap: int | None = None):
    async def go():
        ticks = itertools.count(1)
        got: list[tuple[int, bytes]] = []
        s = cls(lambda: next(ticks), lambda t, p: got.append((t, p)), max_body_bytes=cap)
        for r in reads:
            if s.done.done():
                break
            s.data_received(r)
        r = s.result
        return (got, r.n_payloads, r.complete, s.received_bytes, s.uncommented_bytes,
                type(r.failure).__name__, str(r.failure), r.end_ns)
    return asyncio.run(go())


# chunks a server may send: the one-match shape, and every near miss of it
CHUNKS = [
    frame(b"data: " + partial(1) + b"\n\n"),
    frame(b"data: x\n\n"),
    frame(b"data: \n\n"),
    frame(b"data: a\r\n\r\n"),  # CRLF line ends
    frame(b"data: a\n\ndata: b\n\n"),  # two events in one chunk
    frame(b"data: a\n"),  # half an event
    frame(b"\n"),
    frame(b": keepalive\n\n"),
    frame(b"data:x\n\n"),  # no space after the colon
    frame(b"data: y\n\n", size=5),  # a size that lies (short)
    frame(b"data: y\n\n", size=12),  # a size that lies (long)
    b"9;ext=1\r\ndata: z\n\n\r\n",  # a chunk extension
    b"9\r\ndata: z\n\n",  # a chunk cut before its CRLF
    b"\r\n",
]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(CHUNKS), max_size=8), st.booleans(), st.sampled_from([None, 60, 400]))
def test_any_mix_of_reads_gives_what_the_general_path_gives(chunks, ended, cap):
    reads = [HEAD + frame(b"data: " + partial(0) + b"\n\n"), *chunks] + ([b"0\r\n\r\n"] if ended else [])
    assert run_reads(HttpStream, reads, cap) == run_reads(_General, reads, cap)


def test_a_whole_event_per_read_takes_the_match_and_keeps_each_reads_stamp():
    reads = [HEAD + frame(b"data: " + partial(1) + b"\n\n")]
    reads += [frame(b"data: " + partial(k) + b"\n\n") for k in range(2, 6)] + [b"0\r\n\r\n"]
    taken: list[bool] = []

    class Watched(HttpStream):
        def _read_at(self, t, data):
            taken.append(False)
            super()._read_at(t, data)

    got, n, complete, *_ = run_reads(Watched, reads)
    assert [t for t, _ in got] == [1, 2, 3, 4, 5] and n == 5 and complete
    assert [p for _, p in got] == [partial(k) for k in range(1, 6)]
    assert len(taken) == 2  # the head's read and the end's: the four reads between took the match


def test_the_match_reads_straight_out_of_the_lent_buffer():
    async def go():
        got: list[bytes] = []
        s = HttpStream(lambda: 7, lambda t, p: got.append(p))
        s.data_received(HEAD + frame(b"data: a\n\n"))
        wire = frame(b"data: " + partial(2) + b"\n\n")
        view = s.get_buffer(-1)
        view[: len(wire)] = wire
        view[len(wire) : len(wire) + 5] = b"stale"  # what an earlier, longer read left there
        s.buffer_updated(len(wire))
        return got, s.received_bytes
    got, received = asyncio.run(go())
    assert got == [b"a", partial(2)]
    assert received == len(HEAD) + len(frame(b"data: a\n\n")) + len(frame(b"data: " + partial(2) + b"\n\n"))


def test_a_partial_events_count_is_the_one_interpret_native_reads():
    assert native_partial_so_far(partial(7)) == interpret_native(partial(7)).tokens_so_far == 7
    assert native_partial_so_far(partial(7, "caf\u00e9")) == 7
    final = partial(7).replace(b'"stop":false,"id_slot":-1', b'"stop":true,"id_slot":3')
    assert native_partial_so_far(final) is None and interpret_native(final).final
    assert native_partial_so_far(b'{"error":{"message":"x"}}') is None


def _read_all(payloads: list[bytes], max_tokens: int, fast: bool) -> StreamOutcome:
    client = StreamClient(Endpoint.of("http://127.0.0.1:9"))
    out = StreamOutcome()
    reader = _PayloadReader(client, out, max_tokens=max_tokens)
    if not fast:
        reader.so_far = None
    for t, p in enumerate(payloads, 1):
        reader.feed(t, p)
    out.wire = None
    return out


PAYLOADS = [partial(1), partial(2), partial(2), partial(4), partial(3), partial(9, "\u00e9"),
            b'{"error":{"code":500,"message":"crashed"}}', b"not json",
            partial(5).replace(b'"stop":false,"id_slot":-1', b'"stop":true,"id_slot":0')]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(PAYLOADS), max_size=10), st.integers(1, 8))
def test_a_reader_that_parses_every_event_ends_the_same(payloads, max_tokens):
    fast, slow = _read_all(payloads, max_tokens, True), _read_all(payloads, max_tokens, False)
    assert fast == slow


def test_the_reader_counts_a_stream_of_partials_exactly():
    out = _read_all([partial(k) for k in range(1, 5)], 4, True)
    assert out.chunks == [(1, 1), (2, 1), (3, 1), (4, 1)] and out.output_tokens == 4 and out.token_count_exact
