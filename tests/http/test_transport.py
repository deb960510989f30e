"""The HTTP/1.1 transport's framing: chunked bodies split anywhere, bad framing is ParseError."""

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from satbench.errors import ParseError
from satbench.http.framing import ChunkedDecoder, parse_head


def chunked(*parts: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


def test_chunked_decoder_any_split_point():
    wire = chunked(b"data: a\n\n", b"data: bb\n\n", b"x" * 300)
    for cut in range(1, len(wire)):
        d = ChunkedDecoder()
        body = d.feed(wire[:cut]) + d.feed(wire[cut:])
        assert body == b"data: a\n\ndata: bb\n\n" + b"x" * 300 and d.done


@pytest.mark.parametrize("wire", [b"zz\r\nab\r\n", b"2\r\nabXX", b"-1\r\n"])
def test_bad_chunk_framing(wire):
    with pytest.raises(ParseError):
        ChunkedDecoder().feed(wire)


def test_parse_head():
    status, headers = parse_head(b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: 12")
    assert status == 400 and headers["content-length"] == "12"
    with pytest.raises(ParseError):
        parse_head(b"SSH-2.0-OpenSSH\r\n")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=10))
def test_fuzz_chunked_decoder_raises_only_parse_error(pieces):
    d = ChunkedDecoder()
    try:
        for p in pieces:
            d.feed(p)
    except ParseError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_fuzz_parse_head_raises_only_parse_error(head):
    with contextlib.suppress(ParseError):
        parse_head(head)


def test_body_bytes_before_a_bad_chunk_frame_in_the_same_read_are_kept():
    """Tokens that arrived in the same read as a malformed frame count: the decoder hands them over
    with its error, whatever the read boundaries were."""
    from satbench.http.framing import BadChunk, ChunkedDecoder

    body = b"5\r\nhello\r\n3\r\nabc\r\nzz\r\n"
    whole = ChunkedDecoder()
    with pytest.raises(BadChunk) as caught:
        whole.feed(body)
    assert caught.value.decoded == b"helloabc" and "bad chunk size" in str(caught.value)
    split = ChunkedDecoder()
    assert split.feed(body[:10]) == b"hello"
    with pytest.raises(BadChunk) as caught:
        split.feed(body[10:])
    assert caught.value.decoded == b"abc"
