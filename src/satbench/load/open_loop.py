"""Open-loop load generator: requests arrive on a seeded Poisson schedule, whatever the server does.

A closed loop (loadgen.py) sends the next request when one finishes, so a slow server slows its own
load; a router's node faces arrivals instead. Here request i *arrives* at

    t_i = t_0 + Σ_{j ≤ i} X_j,   X_j ~ Exponential(rate_rps)   (seconds; X_0 = 0)

drawn from `random.Random(seed)` (a replayed trace gives its own t_i: `OpenPlan.offsets_ns`), and is
sent then, unless `max_concurrency` requests are already in flight: it then waits in the client
(first come, first sent) until one finishes. Each event's `targeted_ns` is its arrival t_i and
`sent_ns` when it was handed to the socket, so the client-side
wait is `sent_ns − targeted_ns` and latency *from arrival* is what a router's caller sees. `stream`
is the in-flight slot (0 ≤ stream < max_concurrency) that carried it. Every request is recorded,
failed ones too (loadgen.run_recorded); the level marks bracket the rate like a closed-loop level.
A rate ends `failed` when more than MOSTLY_FAILED of its requests failed (the commonest error named):
a server that times most of them out has not served that rate, and the run says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from satbench.http.client import CompletionRequest
from satbench.load.eventloop import sleep_until
from satbench.load.liveness import StreamActivity
from satbench.load.loadgen import (
    CompletionStreamer,
    LevelPlan,
    Sink,
    TurnGate,
    cancel_all,
    gc_paused,
    level_mark,
    run_recorded,
    stopped,
    to_event,
)
from satbench.records.events import LevelMark, LevelStatus, RequestEvent

NS_PER_S = 1_000_000_000
MOSTLY_FAILED = 0.5  # a rate with more than this share of its requests failed ends failed


def arrival_offsets_ns(rate_rps: float, n: int, seed: int) -> list[int]:
    """The arrival times of `n` requests after the first, in ns from it (offsets[0] = 0): cumulative
    sums of Exponential(rate_rps) gaps drawn from `random.Random(seed)`. The same (rate, n, seed)
    gives the same schedule."""
    rng, t, out = random.Random(seed), 0.0, []
    for i in range(n):
        if i:
            t += rng.expovariate(rate_rps)
        out.append(round(t * NS_PER_S))
    return out


def open_seed(seed: int, rate_index: int, repetition: int) -> int:
    """The seed of one rate's schedule: distinct per rate and repetition, reproducible from the lane's."""
    return seed * 1_000_003 + rate_index * 1_009 + repetition


@dataclass
class OpenPlan:
    """One open-loop rate: its requests in arrival order, the rate, the in-flight cap and the seed of
    its Poisson arrivals; or, for a replayed trace, its arrivals given (`offsets_ns`, one per request,
    from the first: workload/trace_file.py), the seed then unused."""

    level: LevelPlan  # scenario "open"; level = the rate's position (1-based) in the lane's rates
    rate_rps: float
    max_concurrency: int
    seed: int
    offsets_ns: list[int] | None = None


class _OpenRate:
    """One open-loop rate while it runs: its request tasks, the free in-flight slots (a heap: the
    lowest is taken first), the error type of each failed request, and the first request task that
    raised (its record not written), which stops the arrivals (run_open)."""

    def __init__(self, client: CompletionStreamer, plan: OpenPlan, sink: Sink, clock: Callable[[], int],
                 activity: StreamActivity | None, on_done: Callable[[RequestEvent], None] | None) -> None:
        self.client, self.plan, self.sink, self.clock = client, plan.level, sink, clock
        self.activity, self.on_done = activity, on_done
        self.free = list(range(plan.max_concurrency))
        self.slot_free = asyncio.Condition()
        self.turns = TurnGate()
        self.tasks: set[asyncio.Task] = set()
        self.errors: list[str] = []
        self.failure: BaseException | None = None
        self.failed = asyncio.Event()

    def note(self, exc: BaseException) -> None:
        """A request task raised (its record could not be written): the arrivals stop, and the arrival
        loop raises it, as a failed stream stops a closed-loop level."""
        if self.failure is None:
            self.failure = exc
            self.failed.set()

    def finished(self, task: asyncio.Task) -> None:
        """A request's task ended: forgotten, its exception retrieved (and noted)."""
        self.tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            self.note(exc)

    async def until(self, delay_s: float) -> None:
        """Sleep `delay_s`, or less when a request task fails; then raise its exception, if any."""
        if delay_s > 0 and not self.failed.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.failed.wait(), timeout=delay_s)
        if self.failure is not None:
            raise self.failure

    async def one(self, stream: int, seq: int, req: CompletionRequest, arrival_ns: int) -> None:
        try:
            event = await run_recorded(
                self.client, req, lambda o: to_event(self.plan, stream, seq, "measured", req, arrival_ns, o),
                self.sink, self.clock, activity=self.activity, turns=self.turns)
            if event.error is not None:
                self.errors.append(event.error.type)
            if self.on_done is not None:
                self.on_done(event)
        except Exception as exc:  # noted before its slot is freed: no arrival takes the slot first
            self.note(exc)
            raise
        finally:
            async with self.slot_free:
                heapq.heappush(self.free, stream)
                self.slot_free.notify()

    async def send_all(self, offsets_ns: list[int]) -> None:
        """Send each request at its arrival (the first now, the others `offsets_ns` after it) in the
        lowest free slot, then wait for the last to end; a request task's exception is raised."""
        start = self.clock()
        for seq, (req, off) in enumerate(zip(self.plan.measured, offsets_ns)):
            arrival = start + off
            await sleep_until(self.clock, arrival, self.until)
            async with self.slot_free:
                await self.slot_free.wait_for(lambda: bool(self.free) or self.failure is not None)
                await self.until(0)
                stream = heapq.heappop(self.free)
            task = asyncio.ensure_future(self.one(stream, seq, req, arrival))
            self.tasks.add(task)
            task.add_done_callback(self.finished)
        while self.tasks:
            done, _ = await asyncio.wait(set(self.tasks), return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                self.finished(task)
            await self.until(0)


def rate_status(status: LevelStatus, reason: str | None, n_requests: int,
                errors: list[str]) -> tuple[LevelStatus, str | None]:
    """How a rate ended: failed when it would end complete but more than MOSTLY_FAILED of its
    `n_requests` failed (`errors`: the error type of each), the commonest error named; else as given."""
    if status != "complete" or not n_requests or len(errors) <= MOSTLY_FAILED * n_requests:
        return status, reason
    kind, count = Counter(errors).most_common(1)[0]
    said = (f"every one of the {n_requests} requests failed" if len(errors) == n_requests
            else f"{len(errors)} of its {n_requests} requests failed")
    return "failed", f"{said} (most: {kind}, {count})"


async def run_open(client: CompletionStreamer, plan: OpenPlan, sink: Sink, *,
                   on_done: Callable[[RequestEvent], None] | None = None,
                   clock: Callable[[], int] = time.perf_counter_ns,
                   activity: StreamActivity | None = None) -> LevelMark:
    """Send `plan`'s requests at their arrival times (at most `max_concurrency` in flight) and return
    the end mark (also written to `sink`); a cancelled run records its requests in flight as
    cancelled and its end mark as interrupted, as a closed-loop level does."""
    lp = plan.level
    offsets = (plan.offsets_ns if plan.offsets_ns is not None
               else arrival_offsets_ns(plan.rate_rps, len(lp.measured), plan.seed))
    rate = _OpenRate(client, plan, sink, clock, activity, on_done)
    sink.write(level_mark(lp, "level_start", clock()))
    status: LevelStatus = "complete"
    reason: str | None = None
    try:
        with gc_paused():
            await rate.send_all(offsets)
    except asyncio.CancelledError as exc:
        status, reason = stopped(exc, activity)
        await cancel_all(list(rate.tasks))
        raise
    except Exception as exc:
        await cancel_all(list(rate.tasks))
        status, reason = "failed", f"{exc.__class__.__name__}: {exc}"
        raise
    finally:
        status, reason = rate_status(status, reason, len(lp.measured), rate.errors)
        end = level_mark(lp, "level_end", clock(), status, reason)
        sink.write(end)
    return end
