"""The load generator drives any CompletionStreamer (load/loadgen.py): a scripted one in place of the
HTTP client, with a clock the test owns, gives exactly the events and level marks it scripted."""

from __future__ import annotations

import asyncio

from satbench.http.client import CompletionRequest, StreamOutcome
from satbench.load.loadgen import CompletionStreamer, LevelPlan, run_level
from satbench.records.events import LevelMark, RequestEvent
from tests.builders import ListSink


class ScriptedStreamer:
    """Answers every request with `tokens` one-token chunks, 10 ticks apart on `clock`; a request
    whose id is in `fail` ends as a timeout with no token."""

    def __init__(self, clock: list[int], tokens: int, fail: frozenset[str] = frozenset()) -> None:
        self.clock, self.tokens, self.fail = clock, tokens, fail
        self.sent: list[str] = []

    def now(self) -> int:
        self.clock[0] += 1
        return self.clock[0]

    async def run(self, req: CompletionRequest, out: StreamOutcome) -> StreamOutcome:
        self.sent.append(req.request_id)
        out.sent_ns = self.now()
        await asyncio.sleep(0)
        if req.request_id in self.fail:
            out.error_type, out.error_message, out.end_ns = "timeout", "no byte for 60 s", self.now()
            return out
        out.headers_ns, out.http_status = self.now(), 200
        for _ in range(self.tokens):
            self.clock[0] += 10
            out.chunks.append((self.clock[0], 1))
            out.output_tokens += 1
            await asyncio.sleep(0)
        out.end_ns = self.now()
        return out


def requests(tag: str, k: int) -> list[CompletionRequest]:
    return [CompletionRequest(request_id=f"{tag}{i}", prompt=[1] * 8, prompt_tokens=8, max_tokens=3)
            for i in range(k)]


async def test_a_level_runs_through_a_scripted_streamer():
    clock = [0]
    client = ScriptedStreamer(clock, tokens=3, fail=frozenset({"m5"}))
    streamer: CompletionStreamer = client
    plan = LevelPlan(lane="a", level=2, repetition=1, warmup=requests("w", 2), measured=requests("m", 6))
    sink = ListSink()
    done: list[RequestEvent] = []
    end = await run_level(streamer, plan, sink, on_done=done.append, clock=client.now)
    marks = [r for r in sink.records if isinstance(r, LevelMark)]
    events = [r for r in sink.records if isinstance(r, RequestEvent)]
    assert [m.kind for m in marks] == ["level_start", "level_end"] and sink.records[-1] is end
    assert end.status == "complete" and end.n_requests == 6 and marks[0].t_ns < end.t_ns
    assert sorted(client.sent) == sorted(r.request_id for r in plan.warmup + plan.measured)
    assert events == done and len(events) == 8
    assert sorted(e.request_id for e in events if e.phase == "warmup") == ["w0", "w1"]
    assert sorted(e.seq for e in events if e.phase == "measured") == list(range(6))
    ok = [e for e in events if e.ok]
    assert len(ok) == 7 and all(len(e.chunks) == 3 and e.output_tokens == 3 for e in ok)
    assert all(e.sent_ns <= e.headers_ns <= e.chunks[0][0] < e.end_ns for e in ok if e.headers_ns)
    failed = next(e for e in events if not e.ok)
    assert failed.request_id == "m5" and failed.error is not None and failed.error.type == "timeout"
    assert failed.chunks == [] and failed.targeted_ns < failed.sent_ns <= failed.end_ns


async def test_a_level_where_every_measured_request_fails_ends_failed():
    clock = [0]
    client = ScriptedStreamer(clock, tokens=2, fail=frozenset(f"m{i}" for i in range(4)))
    plan = LevelPlan(lane="a", level=1, repetition=2, warmup=[], measured=requests("m", 4))
    end = await run_level(client, plan, ListSink(), clock=client.now, max_consecutive_unreachable=10)
    assert end.status == "failed" and end.reason is not None
    assert end.reason == "every measured request failed (timeout ×4; first: no byte for 60 s)"


async def test_a_conversation_stays_on_its_stream_in_order_and_waits_its_think_time(monkeypatch):
    """Two conversations of 3 turns on 2 streams: each conversation's turns run on one stream in turn
    order, each turn after 2 and 3 waits its think time, and events carry conversation and turn."""
    slept: list[float] = []
    real_sleep = asyncio.sleep
    clock = [0]  # the scripted clock (ns): a sleep moves it on by its delay, as time would

    async def sleep(delay: float, *args):
        if delay:
            slept.append(delay)
            clock[0] += round(delay * 1e9)
        await real_sleep(0)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    turns = [CompletionRequest(request_id=f"c{c}t{t}", prompt="hi", prompt_tokens=8, max_tokens=2,
                               cache_prompt=True, conversation=c, turn=t, think_s=0.25 if t > 1 else 0.0)
             for c in range(2) for t in (1, 2, 3)]
    client = ScriptedStreamer(clock, tokens=2)
    sink = ListSink()
    plan = LevelPlan(lane="a", level=2, repetition=1, warmup=[], measured=turns)
    await run_level(client, plan, sink, clock=client.now)
    events = [r for r in sink.records if isinstance(r, RequestEvent)]
    for c in range(2):
        mine = sorted((e for e in events if e.conversation == c), key=lambda e: e.sent_ns)
        assert [e.turn for e in mine] == [1, 2, 3] and len({e.stream for e in mine}) == 1
    # each think is one sleep to its deadline, less the tick the scripted clock moves per reading
    assert slept == [0.249999999] * 4
