"""The server's own prompt token count travels into the event (`server_prompt_tokens`), next to
the length the workload asked for (`prompt_tokens`): without llama.cpp's /tokenize the prompt is
text of about N words, so the real count differs, and total tok/s needs the real one."""

from __future__ import annotations

import json
from pathlib import Path

from satbench.http.client import CompletionRequest, StreamClient
from satbench.http.endpoint import Endpoint
from satbench.load.loadgen import LevelPlan, run_level, to_event
from satbench.records.events import EVENTS_FILE, RequestEvent, read_events
from tests.builders import ListSink
from tests.fakes.fake_llama_server import FakeLlamaServer, FakeScript
from tests.fakes.raw_server import RawServer


class OpenAIServer(RawServer):
    """Raw TCP server speaking a generic OpenAI-style stream: four text chunks, then (optionally)
    the `usage` chunk of `stream_options.include_usage`, then [DONE]."""

    def __init__(self, usage: dict | None) -> None:
        self.usage = usage

    async def handle(self, reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        events: list = [{"choices": [{"index": 0, "text": "x", "finish_reason": None}]}] * 3
        events.append({"choices": [{"index": 0, "text": "x", "finish_reason": "length"}]})
        if self.usage is not None:
            events.append({"choices": [], "usage": self.usage})
        body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
                     + body)
        await writer.drain()
        writer.close()


def text_req(words: int, asked: int, n_out: int = 4) -> CompletionRequest:
    return CompletionRequest(request_id="r1", prompt=" ".join(["hello"] * words), prompt_tokens=asked,
                             max_tokens=n_out)


def event_of(req: CompletionRequest, out) -> RequestEvent:
    plan = LevelPlan(lane="a", level=1, repetition=1, warmup=[], measured=[req])
    return to_event(plan, 0, 0, "measured", req, out.sent_ns, out)


async def test_openai_usage_prompt_tokens_is_recorded_next_to_the_requested_length():
    usage = {"prompt_tokens": 48, "completion_tokens": 4, "total_tokens": 52}
    async with OpenAIServer(usage) as srv:
        req = text_req(words=32, asked=32)
        out = await StreamClient(Endpoint.of(srv.url), "openai", model_name="m").run(req)
    assert out.error_type is None and out.server_prompt_tokens == 48
    ev = event_of(req, out)
    assert ev.server_prompt_tokens == 48 and ev.prompt_tokens == 32
    assert RequestEvent.model_validate_json(ev.model_dump_json()).server_prompt_tokens == 48


async def test_without_usage_the_server_prompt_count_is_none():
    async with OpenAIServer(None) as srv:
        req = text_req(words=32, asked=32)
        out = await StreamClient(Endpoint.of(srv.url), "openai", model_name="m").run(req)
    assert out.error_type is None
    ev = event_of(req, out)
    assert ev.server_prompt_tokens is None and ev.prompt_tokens == 32


async def test_native_llamacpp_tokens_evaluated_fills_it_through_the_load_generator():
    """The fake counts one token per word, like a text prompt sent without /tokenize."""
    async with FakeLlamaServer(FakeScript(n_slots=2)) as srv:
        measured = [text_req(words=53, asked=32, n_out=4).model_copy(update={"request_id": f"m{i}"})
                    for i in range(3)]
        plan = LevelPlan(lane="a", level=2, repetition=1, warmup=[], measured=measured)
        sink = ListSink()
        await run_level(StreamClient(Endpoint.of(srv.base_url)), plan, sink)
    events = [r for r in sink.records if isinstance(r, RequestEvent)]
    assert len(events) == 3 and all(e.ok for e in events)
    assert all(e.server_prompt_tokens == 53 and e.prompt_tokens == 32 for e in events)
    assert all(e.timings is not None and e.timings.prompt_n is not None for e in events)


async def test_openai_endpoint_of_a_non_llamacpp_fake_fills_it_from_usage():
    async with FakeLlamaServer(FakeScript(n_slots=1, llamacpp=False)) as srv:
        req = text_req(words=48, asked=32)
        out = await StreamClient(Endpoint.of(srv.base_url), "openai", model_name="fake-model").run(req)
    assert out.error_type is None and event_of(req, out).server_prompt_tokens == 48


def test_events_written_before_the_field_existed_still_load(tmp_path: Path):
    old = {"kind": "request", "lane": "a", "level": 1, "repetition": 1, "stream": 0, "seq": 0,
           "phase": "measured", "request_id": "r1", "prompt_tokens": 32, "max_tokens": 4,
           "targeted_ns": 1, "sent_ns": 2, "end_ns": 3}
    (tmp_path / EVENTS_FILE).write_text(json.dumps(old) + "\n")
    [ev] = read_events(tmp_path)
    assert isinstance(ev, RequestEvent) and ev.server_prompt_tokens is None and ev.prompt_tokens == 32
