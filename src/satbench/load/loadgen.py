"""Closed-loop load generator: exactly N requests in flight, a finished one replaced at once.

Each of the N streams first sends its warmup request(s) (recorded, phase "warmup", left out
of every metric), then takes measured requests from one shared queue until it is empty (a chat
conversation's turns as one item, sent in order after each turn's think time).
Every finished request becomes a `RequestEvent` written at once, so a crash loses at most
the requests in flight. Python's cyclic garbage collector is paused while a level runs and
run between levels: its pauses (measured: p99 first-chunk stamp 2.6 ms late at 64 streams
with it, 1.0 ms without) would otherwise land in the timestamps. The steady window is not
decided here: it is computed later from the events alone (metrics/window.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

from satbench.config.limits import MAX_CTX_TOKENS, MAX_SERVER_MS
from satbench.config.schema import Strict
from satbench.http.client import CompletionRequest, StreamOutcome
from satbench.load.eventloop import sleep_until
from satbench.load.liveness import SERVER_UNRESPONSIVE, StreamActivity
from satbench.records.events import (
    CANCELLED,
    LevelMark,
    LevelStatus,
    Phase,
    RequestErrorInfo,
    RequestEvent,
    Scenario,
    ServerTimings,
)

# failures that mean "the server is gone or hung"; N + 3 of them in a row stop a level
UNREACHABLE = frozenset({"connection_dropped", "timeout"})
MarkKind = Literal["level_start", "level_end"]


class Sink(Protocol):
    def write(self, record: Strict) -> None: ...


class CompletionStreamer(Protocol):
    """What the load generator needs of a client (http.client.StreamClient is the one it runs; a
    test passes its own): send `req` and fill `out` as its answer streams, each chunk stamped as it
    is read, then return `out`. A failed request is data (`out.error_type`), never an exception."""

    async def run(self, req: CompletionRequest, out: StreamOutcome) -> StreamOutcome: ...


@dataclass
class LevelPlan:
    """The requests of one repetition of one level; `warmup[i]` belong to stream i % N.

    `background` requests (cycled) keep the streams busy after the measured ones are issued,
    until the runner's `keep_busy` event is set — used when lanes run together, so a lane that
    finishes first still loads the machine while the others measure.
    """

    lane: str
    level: int
    repetition: int
    warmup: list[CompletionRequest]
    measured: list[CompletionRequest]
    scenario: Scenario = "solo"
    background: list[CompletionRequest] = field(default_factory=list)
    check: str | None = None
    session: int = 0


Chain = list[tuple[int, CompletionRequest]]  # (seq, request) that one stream sends in order


def chains(measured: list[CompletionRequest]) -> list[Chain]:
    """`measured` as (seq, request) chains: a conversation's turns (turn 2, 3, … after turn 1 of the
    same conversation) stay on one stream in order; every other request is a chain of its own."""
    out: list[Chain] = []
    for seq, req in enumerate(measured):
        prev = out[-1][-1][1] if out else None
        if (prev is not None and req.turn is not None and req.turn > 1
                and req.conversation == prev.conversation and req.turn == (prev.turn or 0) + 1):
            out[-1].append((seq, req))
        else:
            out.append([(seq, req)])
    return out


def server_timings(raw: dict) -> ServerTimings:
    """The numeric timing fields we keep; anything non-numeric from the server, or outside the range
    a record holds (token counts 0..MAX_CTX_TOKENS, times 0..MAX_SERVER_MS), becomes null."""
    def figure(key: str, most: float) -> int | float | None:
        v = raw.get(key)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v != v or abs(v) == float("inf"):
            return None
        return v if 0 <= v <= most else None

    def count(key: str) -> int | None:
        v = figure(key, MAX_CTX_TOKENS)
        return None if v is None else int(v)

    def ms(key: str) -> float | None:
        v = figure(key, MAX_SERVER_MS)
        return None if v is None else float(v)

    return ServerTimings(cache_n=count("cache_n"), prompt_n=count("prompt_n"), prompt_ms=ms("prompt_ms"),
                         predicted_n=count("predicted_n"), predicted_ms=ms("predicted_ms"))


async def run_recorded(client: CompletionStreamer, req: CompletionRequest,
                       event_of: Callable[[StreamOutcome], RequestEvent],
                       sink: Sink, clock: Callable[[], int] = time.perf_counter_ns,
                       out: StreamOutcome | None = None,
                       activity: StreamActivity | None = None,
                       turns: TurnGate | None = None) -> RequestEvent:
    """`client.run(req)`, then write its event (`event_of` the outcome) to `sink` and return it.
    A request in flight when its level is stopped (Ctrl-C, another lane's failure in the together
    scenario) is written too, as error `cancelled` with the tokens it got, before the cancellation
    goes on: never silently dropped; stopped because the liveness watchdog declared the server
    failed (`activity.verdict`), as error SERVER_UNRESPONSIVE. `activity` sees it while in flight.
    With `turns`, the event is made and written when the gate gives this request its turn (all its
    stamps are already taken); stopped while waiting for it, the finished request is written as it
    ended before the cancellation goes on."""
    out = out if out is not None else StreamOutcome()
    if activity is not None:
        activity.opened(out)
    try:
        await client.run(req, out)
    except asyncio.CancelledError:
        out.end_ns = out.end_ns or clock()
        if activity is not None and activity.verdict is not None:
            out.error_type, out.error_message = SERVER_UNRESPONSIVE, activity.verdict
        else:
            out.error_type, out.error_message = CANCELLED, "its level was stopped while it was in flight"
        sink.write(event_of(out))
        raise
    finally:
        if activity is not None:
            activity.closed(out)
    if turns is not None:
        try:
            await turns.turn()
        except asyncio.CancelledError:
            sink.write(event_of(out))
            raise
    event = event_of(out)
    sink.write(event)
    return event


class TurnGate:
    """One turn per two event-loop iterations, in arrival order: `await gate.turn()` returns when
    it is the caller's. The streams of a level finish together (the server ends their answers in
    the same decode iteration); their record work (~50 us each: the event's validation, its JSON
    line, the write) and their next request's setup then run one stream per turn instead of all in
    one loop iteration, so a chunk that arrives meanwhile (another request's first token) is read
    and stamped between turns rather than after the whole burst."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()

    async def turn(self) -> None:
        async with self._lock:
            await asyncio.sleep(0)  # held over one iteration: the callers after it wait for the next


def to_event(
    plan: LevelPlan, stream: int, seq: int, phase: Phase, req: CompletionRequest,
    targeted_ns: int, out: StreamOutcome, role: str | None = None,
) -> RequestEvent:
    """Translate the client's outcome into the raw record (no derived values), built once; its
    chunks are copied and checked in one pass (RequestEvent.chunks)."""
    timings = server_timings(out.timings) if out.timings else None
    error = None
    if out.error_type is not None:
        error = RequestErrorInfo(
            type=out.error_type, message=out.error_message or "", http_status=out.http_status
        )
    return RequestEvent(
        lane=plan.lane, scenario=plan.scenario, level=plan.level, repetition=plan.repetition,
        stream=stream, seq=seq,
        phase=phase, request_id=req.request_id, prompt_tokens=req.prompt_tokens,
        server_prompt_tokens=out.server_prompt_tokens,
        max_tokens=req.max_tokens, targeted_ns=targeted_ns, sent_ns=out.sent_ns,
        headers_ns=out.headers_ns, end_ns=out.end_ns, chunks=out.chunks,
        output_tokens=out.output_tokens, token_count_exact=out.token_count_exact,
        http_status=out.http_status, slot_id=out.slot_id, timings=timings,
        retries=out.retries, retry_reasons=list(out.retry_reasons), error=error, check=plan.check,
        role=role or (phase if plan.check else None),
        session=plan.session, conversation=req.conversation, turn=req.turn,
    )


@contextlib.contextmanager
def gc_paused():
    """Pause automatic cyclic GC (restoring the previous state after), then collect once."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
        gc.collect()


def stopped(exc: asyncio.CancelledError, activity: StreamActivity | None) -> tuple[LevelStatus, str]:
    """How a cancelled level ends: failed with the liveness watchdog's verdict when it declared the
    server failed, else interrupted (Ctrl-C, another lane's failure) with the cancellation's message."""
    if activity is not None and activity.verdict is not None:
        return "failed", activity.verdict
    return "interrupted", str(exc) or "interrupted by the user"


async def cancel_all(tasks) -> None:
    """Cancel `tasks` and wait until each has ended (their requests in flight are recorded then)."""
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def level_mark(plan: LevelPlan, kind: MarkKind, t_ns: int, status: LevelStatus = "running",
               reason: str | None = None) -> LevelMark:
    """The start or end mark of `plan`'s level repetition (its n_requests: the measured ones), at `t_ns`."""
    return LevelMark(kind=kind, lane=plan.lane, scenario=plan.scenario, level=plan.level,
                     repetition=plan.repetition, t_ns=t_ns, n_requests=len(plan.measured), status=status,
                     reason=reason, session=plan.session)


@dataclass
class _Level:
    """One closed-loop level repetition while it runs: what its streams share (the queue of measured
    requests, the failure counts) and how one request, one stream and the end mark go (run_level)."""

    client: CompletionStreamer
    plan: LevelPlan
    sink: Sink
    clock: Callable[[], int]
    activity: StreamActivity | None
    on_done: Callable[[RequestEvent], None] | None
    keep_busy: asyncio.Event | None
    measured_done: Callable[[], None] | None
    start_offsets_s: list[float] | None
    limit: int  # unreachable failures in a row that stop the level
    queue: deque[Chain]
    streams_left: int  # streams whose measured part has not ended
    turns: TurnGate = field(default_factory=TurnGate)
    told: bool = False  # measured_done was called
    consecutive_unreachable: int = 0
    abort_reason: str | None = None
    measured_ok: int = 0
    measured_errors: Counter = field(default_factory=Counter)
    first_error: str = ""

    def mark(self, kind: MarkKind, status: LevelStatus = "running", reason: str | None = None) -> LevelMark:
        """The level's start or end mark, stamped now."""
        return level_mark(self.plan, kind, self.clock(), status, reason)

    def tell_measured_done(self) -> None:
        if not self.told:
            self.told = True
            if self.measured_done is not None:
                self.measured_done()

    async def one(self, stream: int, seq: int, phase: Phase, req: CompletionRequest) -> None:
        """Run one request, write its event, count it; N + 3 unreachable failures in a row (the
        limit) end the level: the queue is emptied and `abort_reason` says why."""
        targeted = self.clock()
        event = await run_recorded(self.client, req,
                                   lambda o: to_event(self.plan, stream, seq, phase, req, targeted, o),
                                   self.sink, self.clock, activity=self.activity, turns=self.turns)
        err = event.error
        if phase == "measured":
            self.count_measured(err)
        if err is not None and err.type in UNREACHABLE:
            self.consecutive_unreachable += 1
            if self.consecutive_unreachable >= self.limit and self.abort_reason is None:
                self.abort_reason = (
                    f"{self.consecutive_unreachable} requests in a row could not reach the server "
                    f"or got no answer ({err.type}: {err.message})"
                )
                self.queue.clear()
        else:
            self.consecutive_unreachable = 0
        if self.on_done is not None:
            self.on_done(event)

    def count_measured(self, err: RequestErrorInfo | None) -> None:
        if err is None:
            self.measured_ok += 1
        else:
            self.first_error = self.first_error or (err.message or err.type)[:200]
            self.measured_errors[err.type] += 1

    async def measured_part(self, stream: int) -> None:
        """Stream `stream`'s warmup requests, then measured chains (`chains`) from the shared queue
        until it is empty: a chain's requests in order, each after its `think_s` (a conversation's
        user between turns)."""
        n = self.plan.level
        if self.start_offsets_s:
            await sleep_until(self.clock, self.clock() + int(self.start_offsets_s[stream] * 1e9))
        for seq in range(stream, len(self.plan.warmup), n):
            if self.abort_reason:
                return
            await self.one(stream, seq, "warmup", self.plan.warmup[seq])
        while self.queue and not self.abort_reason:
            for seq, req in self.queue.popleft():
                if self.abort_reason:
                    return
                if req.think_s:
                    await sleep_until(self.clock, self.clock() + int(req.think_s * 1e9))
                await self.one(stream, seq, "measured", req)

    async def stream_loop(self, stream: int) -> None:
        """One of the N streams: its measured part, then background requests while `keep_busy` is unset."""
        try:
            await self.measured_part(stream)
        finally:
            self.streams_left -= 1
            if self.streams_left == 0:
                self.tell_measured_done()
        n, background, k = self.plan.level, self.plan.background, stream
        while (self.keep_busy is not None and background and not self.keep_busy.is_set()
               and not self.abort_reason):
            await self.one(stream, k, "background", background[k % len(background)])
            k += n

    def nothing_succeeded(self) -> str | None:
        """'every measured request failed (…)' when there were measured requests and none succeeded."""
        if self.measured_ok or not self.measured_errors:
            return None
        kinds = ", ".join(f"{k} ×{v}" for k, v in self.measured_errors.most_common())
        return f"every measured request failed ({kinds}; first: {self.first_error})"

    def ended(self, status: LevelStatus, reason: str | None) -> tuple[LevelStatus, str | None]:
        """How the level ended: failed when the unreachable limit stopped it or (otherwise complete)
        when every measured request failed; else `status`, `reason` as the gather ended."""
        if self.abort_reason:
            return "failed", self.abort_reason
        if status == "complete" and (why := self.nothing_succeeded()):
            return "failed", why
        return status, reason


async def run_level(
    client: CompletionStreamer,
    plan: LevelPlan,
    sink: Sink,
    *,
    on_done: Callable[[RequestEvent], None] | None = None,
    clock: Callable[[], int] = time.perf_counter_ns,
    max_consecutive_unreachable: int | None = None,
    keep_busy: asyncio.Event | None = None,
    measured_done: Callable[[], None] | None = None,
    start_offsets_s: list[float] | None = None,
    activity: StreamActivity | None = None,
) -> LevelMark:
    """Run one level repetition closed-loop and return its end mark (also written to `sink`).

    With `keep_busy`, streams whose measured work is over send background requests until the
    event is set; `measured_done` is called once every measured request has finished.
    `start_offsets_s[i]` delays stream i's first request (staggered clients, as in F3).
    `activity` sees every request in flight (liveness.py); a level cancelled after its watchdog
    declared the server failed (`activity.verdict`) ends `failed` with that reason.
    """
    n = plan.level
    level = _Level(client, plan, sink, clock, activity, on_done, keep_busy, measured_done, start_offsets_s,
                   limit=max_consecutive_unreachable or (n + 3), queue=deque(chains(plan.measured)),
                   streams_left=n)
    sink.write(level.mark("level_start"))
    status: LevelStatus = "complete"
    reason: str | None = None
    streams = [asyncio.ensure_future(level.stream_loop(i)) for i in range(n)]
    try:
        with gc_paused():
            await asyncio.gather(*streams)
    except asyncio.CancelledError as exc:  # Ctrl-C, the together scenario stopping its lanes, the watchdog
        status, reason = stopped(exc, activity)
        raise
    except Exception as exc:  # one stream failed (e.g. its record could not be written): stop the others
        await cancel_all(streams)
        status, reason = "failed", f"{exc.__class__.__name__}: {exc}"
        raise
    finally:
        level.tell_measured_done()  # also when the level failed or was cancelled: never leave others waiting
        end = level.mark("level_end", *level.ended(status, reason))
        sink.write(end)
    return end
