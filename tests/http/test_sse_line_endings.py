"""SSE line endings as WHATWG frames them: CRLF, a bare LF or a bare CR, whatever the chunking."""

from hypothesis import given, settings
from hypothesis import strategies as st

from satbench.http.sse import SseSplitter

EOLS = (b"\r\n", b"\n", b"\r")


def _split(*chunks: bytes) -> list[bytes]:
    s = SseSplitter()
    out = []
    for c in chunks:
        out += s.feed(c)
    return out + s.finish()


def test_a_bare_cr_ends_lines_and_events():
    s = SseSplitter()
    assert s.feed(b'data: {"a":1}\r\r') == [b'{"a":1}']
    assert s.finish() == []
    assert _split(b"data: x\rdata: y\r\r: c\rdata: z\r\r") == [b"x\ny", b"z"]


def test_a_crlf_split_across_two_chunks_is_one_line_ending():
    # the LF arriving alone must not read as a blank line (which would dispatch "a" without "b")
    assert _split(b"data: a\r", b"\ndata: b\r\n\r\n") == [b"a\nb"]
    assert _split(b"data: a\r\n\r", b"\n", b"data: b\r", b"", b"\n\r\n") == [b"a", b"b"]


def test_every_line_ending_at_every_chunk_boundary():
    for eol in EOLS:
        stream = eol.join([b"data: a", b"data: b", b"", b": c", b"", b"data: z", b"", b""])
        for cut in range(1, len(stream)):
            for cut2 in range(cut, len(stream)):
                got = _split(stream[:cut], stream[cut:cut2], stream[cut2:])
                assert got == [b"a\nb", b"z"], (eol, cut, cut2)
        assert _split(*(stream[i:i + 1] for i in range(len(stream)))) == [b"a\nb", b"z"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([b"data: p", b"data: q", b"", b": note", b"event: e"]),
                          st.sampled_from(EOLS)), max_size=16),
       st.lists(st.integers(min_value=0, max_value=200), max_size=8))
def test_chunking_never_changes_the_events(lines, cuts):
    # a bare CR then an empty line ended by LF would be one CRLF: that empty line ends with CRLF instead
    lines = [(line, b"\r\n" if (line, eol) == (b"", b"\n") and i and lines[i - 1][1] == b"\r" else eol)
             for i, (line, eol) in enumerate(lines)]
    stream = b"".join(line + eol for line, eol in lines)
    whole = _split(stream)
    bounds = sorted({min(c, len(stream)) for c in cuts})
    pieces = [stream[a:b] for a, b in zip([0, *bounds], [*bounds, len(stream)])]
    assert _split(*pieces) == whole
    # the events themselves: data lines joined with LF, dispatched at each blank line
    expected, data = [], []
    for line, _ in lines:
        if line.startswith(b"data: "):
            data.append(line[6:])
        elif not line and data:
            expected.append(b"\n".join(data))
            data = []
    assert whole == expected + ([b"\n".join(data)] if data else [])
