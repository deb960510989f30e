"""Open-loop load generator: requests arrive on a seeded Poisson schedule, whatever the server does.

A closed loop (loadgen.py) sends the next request when one finishes, so a slow server slows its own
load; a router's node faces arrivals instead. Here request i *arrives* at

    t_i = t_0 + Σ_{j ≤ i} X_j,   X_j ~ Exponential(rate_rps)   (seconds; X_0 = 0)

drawn from `random.Random(seed)`, and is sent then, unless `max_concurrency` requests are already in
flight: it then waits in the client (first come, first sent) until one finishes. Each event's
`targeted_ns` is its arrival t_i and `sent_ns` when it was handed to the socket, so the client-side
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

from satbench.http.client import CompletionRequest, StreamClient
from satbench.load.liveness import StreamActivity
from satbench.load.loadgen import (
    LevelPlan,
    Sink,
    TurnGate,
    cancel_all,
    gc_paused,
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
    """One open-loop rate: its requests in arrival order, the rate, the in-flight cap and the seed."""

    level: LevelPlan  # scenario "open"; level = the rate's position (1-based) in the lane's rates
    rate_rps: float
    max_concurrency: int
    seed: int


async def run_open(client: StreamClient, plan: OpenPlan, sink: Sink, *,
                   on_done: Callable[[RequestEvent], None] | None = None,
                   clock: Callable[[], int] = time.perf_counter_ns,
                   activity: StreamActivity | None = None) -> LevelMark:
    """Send `plan`'s requests at their arrival times (at most `max_concurrency` in flight) and return
    the end mark (also written to `sink`); a cancelled run records its requests in flight as
    cancelled and its end mark as interrupted, as a closed-loop level does."""
    lp = plan.level
    reqs = lp.measured
    offsets = arrival_offsets_ns(plan.rate_rps, len(reqs), plan.seed)
    free = list(range(plan.max_concurrency))  # the free in-flight slots, a heap: the lowest is taken first
    slot_free = asyncio.Condition()
    turns = TurnGate()
    sink.write(LevelMark(kind="level_start", lane=lp.lane, scenario=lp.scenario, level=lp.level,
                         repetition=lp.repetition, t_ns=clock(), n_requests=len(reqs), session=lp.session))
    tasks: set[asyncio.Task] = set()
    errors: list[str] = []  # the error type of each failed request
    failure: list[BaseException] = []  # the first request task that raised (its record not written)
    failed = asyncio.Event()

    def note(exc: BaseException) -> None:
        """A request task raised (its record could not be written): the arrivals stop, and the arrival
        loop raises it, as a failed stream stops a closed-loop level."""
        if not failure:
            failure.append(exc)
            failed.set()

    def finished(task: asyncio.Task) -> None:
        """A request's task ended: forgotten, its exception retrieved (and noted)."""
        tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            note(exc)

    async def until(delay_s: float) -> None:
        """Sleep `delay_s`, or less when a request task fails; then raise its exception, if any."""
        if delay_s > 0 and not failed.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(failed.wait(), timeout=delay_s)
        if failure:
            raise failure[0]

    async def one(stream: int, seq: int, req: CompletionRequest, arrival_ns: int) -> None:
        try:
            event = await run_recorded(client, req, lambda o: to_event(lp, stream, seq, "measured", req,
                                                                       arrival_ns, o),
                                       sink, clock, activity=activity, turns=turns)
            if event.error is not None:
                errors.append(event.error.type)
            if on_done is not None:
                on_done(event)
        except Exception as exc:  # noted before its slot is freed: no arrival takes the slot first
            note(exc)
            raise
        finally:
            async with slot_free:
                heapq.heappush(free, stream)
                slot_free.notify()

    status: LevelStatus = "complete"
    reason: str | None = None
    try:
        with gc_paused():
            start = clock()
            for seq, (req, off) in enumerate(zip(reqs, offsets)):
                arrival = start + off
                await until((arrival - clock()) / NS_PER_S)
                async with slot_free:
                    await slot_free.wait_for(lambda: bool(free) or bool(failure))
                    await until(0)
                    stream = heapq.heappop(free)
                task = asyncio.ensure_future(one(stream, seq, req, arrival))
                tasks.add(task)
                task.add_done_callback(finished)
            while tasks:
                done, _ = await asyncio.wait(set(tasks), return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    finished(task)
                await until(0)
    except asyncio.CancelledError as exc:
        status, reason = stopped(exc, activity)
        await cancel_all(list(tasks))
        raise
    except Exception as exc:
        await cancel_all(list(tasks))
        status, reason = "failed", f"{exc.__class__.__name__}: {exc}"
        raise
    finally:
        if status == "complete" and reqs and len(errors) > MOSTLY_FAILED * len(reqs):
            common = Counter(errors).most_common(1)[0]
            status, reason = "failed", (f"every one of the {len(reqs)} requests failed"
                                        if len(errors) == len(reqs)
                                        else f"{len(errors)} of its {len(reqs)} requests failed")
            reason += f" (most: {common[0]}, {common[1]})"
        end = LevelMark(kind="level_end", lane=lp.lane, scenario=lp.scenario, level=lp.level,
                        repetition=lp.repetition, t_ns=clock(), n_requests=len(reqs), status=status,
                        reason=reason, session=lp.session)
        sink.write(end)
    return end
