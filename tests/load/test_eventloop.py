"""The load generator's event loop: uvloop's where importable, asyncio's otherwise, and satbench's
transport streams the same way on either (a level against the fake, every event written)."""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import pytest

from satbench.http.client import CompletionRequest, StreamClient
from satbench.http.endpoint import Endpoint
from satbench.load import eventloop
from satbench.load.loadgen import LevelPlan, run_level
from satbench.records.events import RequestEvent, read_events
from satbench.records.writer import JsonlWriter
from tests.fakes.fake_llama_server import FakeLlamaServer
from tests.fakes.fake_script import FakeScript

uvloop = pytest.importorskip("uvloop")


def test_the_default_loop_is_uvloops_when_it_is_importable():
    assert eventloop.loop_factory() is uvloop.new_event_loop
    assert eventloop.run(_name()) == "uvloop"
    assert eventloop.run(_name(), "asyncio") == "asyncio"


def test_without_uvloop_asyncios_loop_runs(monkeypatch):
    monkeypatch.setitem(sys.modules, "uvloop", None)  # `import uvloop` raises ImportError
    assert eventloop.loop_factory() is None
    assert eventloop.run(_name()) == "asyncio"
    with pytest.raises(ImportError):
        eventloop.loop_factory("uvloop")


async def _name() -> str:
    return eventloop.running_loop_name()


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_a_level_streams_and_records_every_request_on_either_loop(loop):
    def req(i: int, phase: str) -> CompletionRequest:
        return CompletionRequest(request_id=f"{phase}{i}", prompt=[1, 2, 3, 4], prompt_tokens=4,
                                 max_tokens=16)

    async def level(run_dir: Path) -> str:
        async with FakeLlamaServer(FakeScript(n_slots=4, decode_iteration_ms=1.0)) as srv:
            plan = LevelPlan(lane="l", level=4, repetition=1, warmup=[req(i, "w") for i in range(4)],
                             measured=[req(i, "m") for i in range(12)])
            sink = JsonlWriter(run_dir / "events.jsonl")
            async with StreamClient(Endpoint.of(srv.base_url)) as client:
                await run_level(client, plan, sink)
            sink.close()
        return eventloop.running_loop_name()

    with tempfile.TemporaryDirectory() as d:
        assert eventloop.run(level(Path(d)), loop) == loop
        events = [e for e in read_events(Path(d)) if isinstance(e, RequestEvent)]
    assert len(events) == 16
    assert all(e.ok and e.output_tokens == 16 and len(e.chunks) == 16 for e in events)
    assert all(e.sent_ns <= e.chunks[0][0] <= e.chunks[-1][0] <= e.end_ns for e in events)


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_sleep_until_never_returns_before_its_deadline(loop):
    """uvloop's timers count whole milliseconds from a cached loop time: a plain sleep can end early."""
    clock = time.perf_counter_ns

    async def early_returns() -> int:
        early = 0
        for i in range(60):
            deadline = clock() + 1_700_000 + 13_000 * i
            await eventloop.sleep_until(clock, deadline)
            early += clock() < deadline
        return early

    assert eventloop.run(early_returns(), loop) == 0
