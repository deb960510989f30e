"""A level stopped while requests are in flight (Ctrl-C, or the together scenario stopping the
other lanes when one fails) still records every request it sent: error `cancelled`, with the
tokens each got — never silently dropped (DESIGN.md §3)."""

from __future__ import annotations

import asyncio
import contextlib

from satbench.http.client import CompletionRequest, StreamClient
from satbench.http.endpoint import Endpoint
from satbench.load.loadgen import LevelPlan, run_level
from satbench.records.events import CANCELLED, LevelMark, RequestEvent
from tests.builders import ListSink
from tests.fakes.fake_llama_server import FakeLlamaServer, FakeScript


def requests(tag: str, k: int, out: int) -> list[CompletionRequest]:
    return [CompletionRequest(request_id=f"{tag}{i}", prompt=[1] * 16, prompt_tokens=16, max_tokens=out)
            for i in range(k)]


async def test_requests_in_flight_when_a_level_is_stopped_are_recorded_as_cancelled():
    async with FakeLlamaServer(FakeScript(n_slots=4, decode_iteration_ms=5)) as server:
        plan = LevelPlan(lane="a", level=4, repetition=1, warmup=requests("w", 4, 4),
                         measured=requests("m", 32, 60))
        sink = ListSink()
        task = asyncio.create_task(run_level(StreamClient(Endpoint.of(server.base_url)), plan, sink))
        await asyncio.sleep(0.8)
        task.cancel("stopped: lane b failed in the together scenario")
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.3)
        seen = {r["id"] for r in server.schedule()}
    events = {e.request_id: e for e in sink.records if isinstance(e, RequestEvent)}
    assert seen <= set(events), f"sent but never recorded: {sorted(seen - set(events))}"
    cancelled = [e for e in events.values() if e.error is not None and e.error.type == CANCELLED]
    assert len(cancelled) == 4  # one per stream, each in flight
    assert all(e.end_ns >= e.sent_ns and e.output_tokens == sum(n for _, n in e.chunks) for e in cancelled)
    assert any(e.output_tokens > 0 for e in cancelled)  # the tokens they got are kept
    end = next(r for r in sink.records if isinstance(r, LevelMark) and r.kind == "level_end")
    assert end.status == "interrupted" and end.reason == "stopped: lane b failed in the together scenario"
