"""The streaming client never raises: drops are retried once and counted, failures are data."""

from __future__ import annotations

import asyncio
import json

from satbench.http.client import CompletionRequest, StreamClient
from satbench.http.endpoint import Endpoint
from tests.fakes.fake_llama_server import FakeLlamaServer
from tests.fakes.fake_scheduler import FakeScript
from tests.fakes.raw_server import RawServer


def req(n_out=4, prompt=None, rid="r1"):
    return CompletionRequest(request_id=rid, prompt=prompt or [1, 2, 3, 4], prompt_tokens=4, max_tokens=n_out)


class ScriptedServer(RawServer):
    """Raw TCP server: each connection gets the next canned behaviour."""

    def __init__(self, behaviours):
        self.behaviours = list(behaviours)
        self.connections = 0

    async def handle(self, reader, writer):
        self.connections += 1
        behaviour = self.behaviours.pop(0) if self.behaviours else "ok"
        await reader.readuntil(b"\r\n\r\n")
        if behaviour == "drop":
            writer.close()
            return
        events = [{"content": "x", "tokens": [7], "stop": False}] * 4
        final = {"content": "", "tokens": [], "stop": True, "id_slot": 0,
                 "timings": {"prompt_n": 4, "prompt_ms": 1.0, "predicted_n": 4}}
        if behaviour == "truncated":
            events = events[:2]
            final = None
        body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
        if final is not None:
            body += b"data: " + json.dumps(final).encode() + b"\n\n"
        if behaviour == "garbage":
            body = b"data: {not json\n\n"
        if behaviour == "stall":  # the head and two tokens, then silence
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
                         + b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events[:2]))
            await writer.drain()
            await asyncio.sleep(5)
            writer.close()
            return
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
                     + body)
        await writer.drain()
        writer.close()


async def test_a_connection_dropped_before_any_byte_is_retried_once_and_counted():
    async with ScriptedServer(["drop", "ok"]) as srv, StreamClient(Endpoint.of(srv.url)) as client:
        out = await client.run(req())
    assert out.error_type is None and out.retries == 1 and out.output_tokens == 4
    # why, not only how many
    assert out.retry_reasons == ["connection closed before any byte of the answer arrived"]
    assert srv.connections == 2


async def test_a_second_drop_is_recorded_not_raised():
    async with ScriptedServer(["drop", "drop"]) as srv, StreamClient(Endpoint.of(srv.url)) as client:
        out = await client.run(req())
    assert out.error_type == "connection_dropped" and out.retries == 1


async def test_truncated_and_malformed_streams_are_errors_with_their_chunks_kept():
    async with ScriptedServer(["truncated", "garbage"]) as srv, StreamClient(Endpoint.of(srv.url)) as client:
        truncated = await client.run(req())
        garbage = await client.run(req())
    assert truncated.error_type == "truncated_stream" and len(truncated.chunks) == 2
    assert garbage.error_type == "malformed_stream"


async def test_wrong_token_count_is_an_error():
    async with ScriptedServer(["ok"]) as srv, StreamClient(Endpoint.of(srv.url)) as client:
        out = await client.run(req(n_out=5))
    assert out.error_type == "wrong_token_count" and "asked for 5" in out.error_message


async def test_http_400_from_llamacpp_is_recorded_with_its_message():
    async with FakeLlamaServer(FakeScript(n_slots=1, n_ctx=64)) as srv, \
            StreamClient(Endpoint.of(srv.base_url)) as client:
        out = await client.run(req(n_out=8, prompt=list(range(100))))
    assert out.error_type == "http_400" and out.http_status == 400
    assert out.error_message  # llama.cpp's own message


async def test_unreachable_server_is_data():
    async with StreamClient(Endpoint.of("http://127.0.0.1:9")) as client:
        out = await client.run(req())
    assert out.error_type == "connection_dropped" and out.end_ns >= out.sent_ns


class HeldBackServer(ScriptedServer):
    """Like llama.cpp when a token ends inside a multi-byte character: no event for token 2."""

    async def handle(self, reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        events = [{"content": "a", "tokens": [7], "stop": False, "tokens_predicted": 1},
                  {"content": "\u00e9b", "tokens": [9], "stop": False, "tokens_predicted": 3},
                  {"content": "c", "tokens": [4], "stop": False, "tokens_predicted": 4},
                  {"content": "", "tokens": [], "stop": True, "id_slot": 0, "tokens_predicted": 4,
                   "timings": {"prompt_n": 4, "prompt_ms": 1.0, "predicted_n": 4}}]
        body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
                     + body)
        await writer.drain()
        writer.close()


async def test_tokens_held_back_by_llamacpp_are_counted_from_tokens_predicted():
    async with HeldBackServer([]) as srv, StreamClient(Endpoint.of(srv.url)) as client:
        out = await client.run(req(n_out=4))
    assert out.error_type is None and out.output_tokens == 4
    assert [n for _, n in out.chunks] == [1, 2, 1]  # the merged event carries two tokens


def test_the_usage_total_is_spread_over_the_chunks():
    from satbench.http.client import spread_over_chunks

    chunks = [(10, 1), (20, 1), (30, 1), (40, 1), (50, 1)]
    assert spread_over_chunks(chunks, 5) == chunks
    spread = spread_over_chunks(chunks, 16)
    assert [t for t, _ in spread] == [10, 20, 30, 40, 50] and sum(n for _, n in spread) == 16
    assert max(n for _, n in spread) - min(n for _, n in spread) <= 1
    assert spread_over_chunks([], 3) == []


async def test_an_openai_server_packing_four_tokens_per_chunk_is_counted_in_full():
    """The chunk list must add up to `usage`, or the steady window's throughput would be 4× low."""
    async with FakeLlamaServer(FakeScript(n_slots=1, llamacpp=False, tokens_per_chunk=4,
                                          decode_iteration_ms=1.0)) as srv:
        client = StreamClient(Endpoint.of(srv.base_url), "openai", model_name="fake-model")
        out = await client.run(req(n_out=16))
    assert out.error_type is None and out.output_tokens == 16
    assert sum(n for _, n in out.chunks) == 16


async def test_a_request_that_times_out_keeps_its_response_head_and_tokens():
    async with ScriptedServer(["stall"]) as srv:
        out = await StreamClient(Endpoint.of(srv.url), read_timeout_s=0.5).run(req())
    assert out.error_type == "timeout" and out.output_tokens == 2
    assert out.http_status == 200 and out.headers_ns is not None
    assert out.sent_ns < out.headers_ns <= out.end_ns


class OpenAiServer(ScriptedServer):
    """An OpenAI-style `/v1/completions` stream: 4 text chunks, a usage chunk, then `data: [DONE]`
    (`done`), or the same without [DONE] (`no_done`), or cut after two text chunks (`cut`)."""

    async def handle(self, reader, writer):
        self.connections += 1
        behaviour = self.behaviours.pop(0) if self.behaviours else "done"
        await reader.readuntil(b"\r\n\r\n")
        chunks = [{"choices": [{"text": "x", "finish_reason": None}]}] * 4
        chunks.append({"choices": [{"text": "", "finish_reason": "length"}],
                       "usage": {"prompt_tokens": 4, "completion_tokens": 4}})
        lines = [b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks]
        if behaviour == "done":
            lines.append(b"data: [DONE]\n\n")
        if behaviour == "cut":
            lines = lines[:2]
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
                     + b"".join(lines))
        await writer.drain()
        writer.close()


async def test_an_openai_stream_that_ends_cleanly_after_its_final_chunk_needs_no_done_marker():
    async with OpenAiServer(["done", "no_done", "cut"]) as srv, \
            StreamClient(Endpoint.of(srv.url), "openai") as client:
        done = await client.run(req())
        no_done = await client.run(req())
        cut = await client.run(req())
    assert done.error_type is None and done.output_tokens == 4
    assert no_done.error_type is None and no_done.output_tokens == 4 and no_done.token_count_exact
    assert cut.error_type == "truncated_stream" and "data: [DONE]" in cut.error_message
