"""An answer satbench cannot count is a failed request that says why: chat deltas holding only tool
calls, only a role, or content arrays (`no_text`), and a compressed body (`compressed_stream`)."""

from __future__ import annotations

import gzip
import json

import pytest

from satbench.http.client import COMPRESSED, NO_TEXT, CompletionRequest, StreamClient
from satbench.http.endpoint import Endpoint
from satbench.http.sse import interpret_openai_chat, textless_kind
from tests.fakes.raw_server import RawServer

ROLE = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": None}}]}
TOOL = {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{"}}]}}]}
ARRAY = {"choices": [{"index": 0, "delta": {"content": [{"type": "text", "text": "x"}]}}]}
TEXT = {"choices": [{"index": 0, "delta": {"content": "x"}}]}
LAST = {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 4, "completion_tokens": 4}}


def req() -> CompletionRequest:
    return CompletionRequest(request_id="r1", prompt="hello", prompt_tokens=4, max_tokens=4)


class ChatServer(RawServer):
    """Each connection gets the next script: (chunks, gzip the body)."""

    def __init__(self, scripts: list[tuple[list[dict], bool]]) -> None:
        self.scripts = list(scripts)

    async def handle(self, reader, writer):
        chunks, packed = self.scripts.pop(0)
        await reader.readuntil(b"\r\n\r\n")
        body = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n"
        if packed:
            body, head = gzip.compress(body), head + b"Content-Encoding: gzip\r\n"
        writer.write(head + b"\r\n" + body)
        await writer.drain()
        writer.close()


@pytest.mark.parametrize("delta,kind", [
    ({"role": "assistant", "content": None}, "only a role"),
    ({"tool_calls": [{"index": 0}]}, "tool calls"),
    ({"role": "assistant", "tool_calls": [{"index": 0}]}, "tool calls"),
    ({"content": [{"type": "text", "text": "x"}]}, "content arrays"),
    ({"content": "x"}, None),
    ({"reasoning_content": "x"}, None),
    ({}, None),
])
def test_what_a_delta_carried_in_place_of_text(delta, kind):
    assert textless_kind({"delta": delta}) == kind
    upd = interpret_openai_chat(json.dumps({"choices": [{"index": 0, "delta": delta}]}).encode())
    assert upd.textless == (kind if not upd.n_tokens else None)


async def test_answers_without_text_fail_naming_what_they_carried():
    scripts = [([ROLE, TOOL, TOOL, LAST], False), ([ROLE, ARRAY, ARRAY, LAST], False), ([ROLE, LAST], False),
               ([ROLE, TEXT, TEXT, TEXT, TEXT, LAST], False)]
    async with ChatServer(scripts) as srv, StreamClient(Endpoint.of(srv.url), "chat") as client:
        tools, arrays, role, text = [await client.run(req()) for _ in scripts]
    assert tools.error_type == NO_TEXT and "its chunks held only a role, tool calls" in tools.error_message
    assert "(4 tokens by its usage)" in tools.error_message
    assert arrays.error_type == NO_TEXT and "content arrays" in arrays.error_message
    assert role.error_type == NO_TEXT and "only a role" in role.error_message
    assert text.error_type is None and text.output_tokens == 4  # the opening role delta is no failure


async def test_a_compressed_answer_names_its_encoding():
    async with ChatServer([([ROLE, TEXT, LAST], True)]) as srv, \
            StreamClient(Endpoint.of(srv.url), "chat") as client:
        out = await client.run(req())
    assert out.error_type == COMPRESSED and "Content-Encoding: gzip" in out.error_message
