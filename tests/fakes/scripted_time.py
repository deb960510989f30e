"""The fake's scheduler on a virtual clock: exact scripted timelines, no HTTP, no wall clock.

`Sim(script)` takes requests that arrive at chosen virtual ms (`send`), then `run` steps from one
event to the next: an arrival is submitted, an iteration ends exactly at its scripted deadline.
Each request's `FakeRequest` carries virtual ns: ``arrival_ns``, ``admit_ns`` (slot taken),
``prompt_start_ns``, ``gen_start_ns`` (= its first token), ``chunk_ns`` (one per token event) and
``end_ns`` (its last token). An arrival at the very ns an iteration ends is submitted first.

Tests assert on these exactly (they are the script's arithmetic, not measurements), and a
benchmark uses them for the true value of a check's statistic (`f2_slowdowns`).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence

from tests.fakes.fake_scheduler import Engine, FakeRequest, FakeScript, VirtualClock

MS = 1_000_000  # ns


class Sim:
    """Requests on a virtual clock; ``then(req, sim)`` runs when `req` has its last token (closed loops)."""

    def __init__(self, script: FakeScript):
        self.clock = VirtualClock()
        self.engine = Engine(script, self.clock)
        self.requests: dict[str, FakeRequest] = {}
        self._arrivals: list[tuple[int, int, FakeRequest]] = []  # (ns, order, request): a heap
        self._then: dict[int, Callable[[FakeRequest, Sim], None]] = {}

    @property
    def now_ms(self) -> float:
        return self.clock.now / MS

    def send(self, at_ms: float, rid: str, prompt_n: int, n_predict: int,
             then: Callable[[FakeRequest, Sim], None] | None = None) -> FakeRequest:
        """A request arriving at `at_ms` (not before the clock)."""
        at_ns = max(round(at_ms * MS), self.clock.now)
        req = FakeRequest(rid, prompt_n, n_predict, {}, self, at_ns)
        self.requests[rid] = req
        if then is not None:
            self._then[id(req)] = then
        heapq.heappush(self._arrivals, (at_ns, len(self.requests), req))
        return req

    def tokens(self, req: FakeRequest, ids: list[int], done: bool, deadline_ns: int) -> None:
        """The engine's sink: records when each token event happened."""
        req.chunk_ns.append(deadline_ns)
        req.chunk_deadline_ns.append(deadline_ns)
        if done:
            req.end_ns = deadline_ns
            if (then := self._then.pop(id(req), None)) is not None:
                then(req, self)

    def run(self, until_ms: float | None = None) -> dict[str, FakeRequest]:
        """Step until nothing is left to do (or the clock would pass `until_ms`); the requests by id."""
        e, clock = self.engine, self.clock
        stop = None if until_ms is None else round(until_ms * MS)
        while True:
            arrival = self._arrivals[0][0] if self._arrivals else None
            deadline = clock.next_deadline if e._running else None
            if arrival is None and deadline is None:
                break
            if deadline is None or (arrival is not None and arrival <= deadline):
                assert arrival is not None
                if stop is not None and arrival > stop:
                    break
                clock.now = arrival
                e.submit(heapq.heappop(self._arrivals)[2])
            else:
                if stop is not None and deadline > stop:
                    break
                clock.now, clock.next_deadline = deadline, None
                e._tick(deadline)
        return self.requests


def e2e_ms(req: FakeRequest) -> float:
    """Arrival to last token, ms."""
    return (req.end_ns - req.arrival_ns) / MS


def ttft_ms(req: FakeRequest) -> float:
    """Arrival to first token, ms."""
    return (req.chunk_ns[0] - req.arrival_ns) / MS


def f2_slowdowns(script: FakeScript, sizes: Sequence[tuple[int, int]], gap_ms: float = 1.0) -> list[float]:
    """F2's slowdown per size (E2E together ÷ E2E alone, arrival to last token) on this script, with
    the requests sent as run/fairness_checks.py sends them: each size alone on an idle server, then all
    together, biggest (prompt + output) first, `gap_ms` apart. `sizes` = (prompt, output) tokens."""
    alone = []
    for prompt, output in sizes:
        sim = Sim(script)
        req = sim.send(0.0, "alone", prompt, output)
        sim.run()
        alone.append(e2e_ms(req))
    sim = Sim(script)
    order = sorted(range(len(sizes)), key=lambda i: -(sizes[i][0] + sizes[i][1]))
    together = {i: sim.send(k * gap_ms, f"together{i}", *sizes[i]) for k, i in enumerate(order)}
    sim.run()
    return [e2e_ms(together[i]) / alone[i] for i in range(len(sizes))]
