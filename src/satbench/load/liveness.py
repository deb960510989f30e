"""Liveness while requests are in flight: a server that stops answering fails within a bound.

Beside every level (and every fairness check) a watchdog looks, every few seconds, for evidence
that the server is alive:

- its process runs (`Runtime.alive()`; a server satbench did not start always "runs");
- something arrived on one of the requests in flight (a response head or a token chunk), or
- when nothing did, the server's probe endpoint answers: GET /slots 200 for llama.cpp with /slots
  enabled (answered between decode iterations, so not by a wedged decode loop); else GET /health
  (any status).

One probe is asked at a time; each look waits for it at most PROBE_WAIT_S. When no evidence came
for LIVENESS_TIMEOUT_S, or the process is gone, the watchdog returns a reason; `run_watched` then
stops the work, whose requests in flight are recorded with error type SERVER_UNRESPONSIVE (a
server failure, unlike `cancelled`), and raises ServerUnresponsive. The server is declared failed
at most DECLARED_WITHIN_S after the last evidence.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import TypeVar

from satbench.config.limits import MAX_CTX_TOKENS, MAX_SLOTS_BYTES
from satbench.http.access import EndpointSession, read
from satbench.http.client import StreamOutcome
from satbench.http.errors import RequestFailed, TooLarge
from satbench.records.events import RequestEvent

LIVENESS_TIMEOUT_S = 20.0  # no evidence of life for this long: the server is declared failed
PROGRESS_TIMEOUT_S = 60.0  # no token on any stream and no /slots progress for this long: failed too
PREFILL_BATCHES = 3  # the progress bound is at least this many batches' prefill at the slowest rate seen
MIN_PREFILL_TOKENS = 16  # prompts shorter than this say little of the prefill rate (fixed costs dominate)
LIVENESS_PERIOD_S = 2.0  # how often the watchdog looks (at most; a shorter bound looks more often)
PROBE_WAIT_S = 3.0  # how long one look waits for the probe's answer (at most; the probe goes on after)
DECLARED_WITHIN_S = LIVENESS_TIMEOUT_S + LIVENESS_PERIOD_S + PROBE_WAIT_S  # last evidence → failed
SLOTS_OFF = (404, 501)  # /slots answered so: llama-server started with --no-slots (501), or no /slots (404)
SERVER_UNRESPONSIVE = "server_unresponsive"  # error of a request in flight when its server is declared failed

T = TypeVar("T")


class ServerUnresponsive(Exception):
    """The watchdog declared the server failed; the message says why. The lane session turns it
    into its LevelFailedError."""


def _received(out: StreamOutcome) -> int:
    """How much one request has received so far: its response head and its token chunks."""
    return len(out.chunks) + (out.headers_ns is not None) + (out.http_status is not None)


class StreamActivity:
    """The requests in flight on one server and how much they received: the watchdog's evidence.
    Once `verdict` is set (the server was declared failed), a request stopped in flight is
    recorded as SERVER_UNRESPONSIVE with it as its message."""

    def __init__(self) -> None:
        self._open: dict[int, StreamOutcome] = {}
        self._closed = 0  # what the finished requests received, so a request ending is no change
        self.finished = 0  # requests that ended: progress, whatever they received
        self.verdict: str | None = None

    def opened(self, out: StreamOutcome) -> None:
        self._open[id(out)] = out

    def closed(self, out: StreamOutcome) -> None:
        if self._open.pop(id(out), None) is not None:
            self._closed += _received(out)
            if out.output_tokens or out.error_type is None:  # a request that failed without a token
                self.finished += 1  # (a read timeout on a server that sends nothing) is no progress

    def progress(self) -> tuple[int, int]:
        """(requests finished with a token or without error, tokens on the requests in flight):
        changes whenever one makes progress."""
        return self.finished, sum(o.output_tokens for o in self._open.values())

    def wire(self) -> tuple[int, int, int]:
        """(bytes, SSE payloads, bytes outside SSE comment and blank lines) received so far by the
        requests in flight: what arrived without a token."""
        streams = [o.wire for o in self._open.values() if o.wire is not None]
        return (sum(w.received_bytes for w in streams), sum(w.result.n_payloads for w in streams),
                sum(w.uncommented_bytes for w in streams))

    @property
    def in_flight(self) -> int:
        return len(self._open)

    def received(self) -> int:
        """A count that changes whenever anything arrives on any request (finished or in flight)."""
        return self._closed + sum(_received(o) for o in self._open.values())


class LivenessProbe:
    """The watchdog's probe of one server, called with its deadline: whether the server answered.

    With the `slots` session of a llama.cpp server, GET /slots answering 200 within the deadline
    (read with MAX_SLOTS_BYTES; an answer past that limit is an answer too). Where /slots is off
    (SLOTS_OFF: HTTP 501, or 404) it is not asked again and `health` (GET /health, any status) is
    the probe, as for a server that is not llama.cpp (no `slots`); another status of /slots falls
    back to `health` for that probe only. `path` names the endpoint asked."""

    def __init__(self, health: Callable[[float], Awaitable[bool]],
                 slots: EndpointSession | None = None) -> None:
        self._health, self._slots = health, slots
        self.path = "/slots" if slots is not None else "/health"
        self.slots_progress: int | None = None  # the last /slots answer's progress (`slots_progress`)

    async def __call__(self, deadline_s: float) -> bool:
        loop = asyncio.get_running_loop()
        end = loop.time() + deadline_s
        if self.path == "/slots":
            assert self._slots is not None
            try:
                answer = await read(self._slots, "/slots", timeout_s=deadline_s, limit_bytes=MAX_SLOTS_BYTES)
            except TooLarge:
                return True
            except RequestFailed:
                return False
            status, body = answer.status, answer.body
            if status == 200:
                self.slots_progress = slots_progress(body)
                return True
            if status in SLOTS_OFF:
                self.path = "/health"
        left = end - loop.time()
        return left > 0 and await self._health(left)


def slots_progress(body: bytes) -> int | None:
    """The work a /slots answer shows done: Σ over its slots of tokens decoded (next_token[0]
    .n_decoded) and prompt tokens processed (n_prompt_tokens_processed); None when the answer says
    neither (another server, or nonsense: never an error here)."""
    try:
        slots = json.loads(body)
    except (ValueError, RecursionError):
        return None
    total, said = 0, False
    for slot in slots if isinstance(slots, list) else []:
        if not isinstance(slot, dict):
            continue
        nxt = slot.get("next_token")
        first = nxt[0] if isinstance(nxt, list) and nxt and isinstance(nxt[0], dict) else {}
        for value in (first.get("n_decoded"), slot.get("n_prompt_tokens_processed")):
            if type(value) is int and 0 <= value <= MAX_CTX_TOKENS:
                total, said = total + value, True
    return total if said else None


def progress_bound_s(floor_s: float, prefill_ms_per_token: float | None, n_batch: int) -> float:
    """How long no token and no /slots work may last before a level fails: `floor_s`
    (PROGRESS_TIMEOUT_S), or PREFILL_BATCHES batches of n_batch prompt tokens at the slowest prefill
    seen (ms per token, from the server's own timings) when that is longer: llama.cpp reports prompt
    progress per batch, so a batch that takes longer than the floor would look like none.

    Formula: max(floor_s, PREFILL_BATCHES × n_batch × prefill_ms_per_token / 1000) s."""
    if prefill_ms_per_token is None:
        return floor_s
    return max(floor_s, PREFILL_BATCHES * n_batch * prefill_ms_per_token / 1000.0)


def prefill_ms_per_token(event: RequestEvent) -> float | None:
    """The request's prefill cost (ms per prompt token its server processed, from its timings); None
    without timings or for a prompt below MIN_PREFILL_TOKENS new tokens."""
    t = event.timings
    if t is None or t.prompt_ms is None or t.prompt_n is None or t.prompt_n < MIN_PREFILL_TOKENS:
        return None
    return t.prompt_ms / t.prompt_n


def _what_arrived(bytes_: int, payloads: int, uncommented: int) -> str:
    """What came on the streams while no token did, as the failure names it: "SSE comments only"
    when every line that came was a comment (`: keepalive`) or blank and no event came; else "bytes
    without a token" (events without a token, other fields, an unfinished line)."""
    if not bytes_:
        return "nothing arrived"
    return "SSE comments only" if not payloads and not uncommented else "bytes without a token"


class _ProgressWatch:
    """What `watch` last saw of progress (requests finished, tokens in flight, /slots work) and when
    it last moved, with the wire's counts then (what arrived since, when nothing moved)."""

    def __init__(self, activity: StreamActivity, slots_progress: Callable[[], int | None],
                 clock: Callable[[], float]) -> None:
        self.activity, self.slots_progress, self.clock = activity, slots_progress, clock
        self.moved, self.last_move = activity.progress(), clock()
        self.wire_then, self.slots_then = activity.wire(), slots_progress()

    def stalled(self, timeout_s: float, probed: Callable[[], str]) -> str | None:
        """The failure when nothing moved for `timeout_s` while requests were in flight (`probed()`
        names the probe); else None (and a move, or nothing in flight, starts the wait again)."""
        activity = self.activity
        now_moved, now_slots = activity.progress(), self.slots_progress()
        if now_moved != self.moved or now_slots != self.slots_then or not activity.in_flight:
            self.moved, self.slots_then, self.last_move = now_moved, now_slots, self.clock()
            self.wire_then = activity.wire()
            return None
        if self.clock() - self.last_move < timeout_s:
            return None
        n = activity.in_flight
        what = _what_arrived(*(now - then for now, then in zip(activity.wire(), self.wire_then, strict=True)))
        return (f"the server made no progress: no token on any of {n} stream{'s' if n != 1 else ''} "
                f"and no decode or prompt progress in {probed()} for {timeout_s:g} s ({what})")


async def watch(activity: StreamActivity, alive: Callable[[], bool],
                answers: Callable[[float], Awaitable[bool]], timeout_s: float = LIVENESS_TIMEOUT_S,
                clock: Callable[[], float] = time.monotonic,
                probed: Callable[[], str] = lambda: "/health",
                progress_timeout_s: float = PROGRESS_TIMEOUT_S,
                slots_progress: Callable[[], int | None] = lambda: None) -> str:
    """Return (only) when the server is to be declared failed, with the reason: its process is
    gone; or for `timeout_s` nothing arrived on the requests in flight and no `answers(deadline)`
    (the probe: /slots or /health, `probed()` names it) said yes; or for `progress_timeout_s` no
    request finished, no token arrived on any in flight and the probe's `slots_progress()` (tokens
    decoded and prompt tokens processed, per /slots) did not move, whatever else arrived (SSE
    comments, bytes, probe answers): the reason names it. One probe is in flight at a time, with
    `timeout_s` as its deadline; each look waits for it at most PROBE_WAIT_S. Nothing in flight
    counts as evidence (nothing is awaited)."""
    period_s = min(LIVENESS_PERIOD_S, timeout_s / 4)
    wait_s = min(PROBE_WAIT_S, timeout_s / 4)
    seen, last_evidence = activity.received(), clock()
    progress = _ProgressWatch(activity, slots_progress, clock)
    probe: asyncio.Future[bool] | None = None
    try:
        while True:
            await asyncio.sleep(period_s)
            if not alive():
                return "the server process ended"
            if (stalled := progress.stalled(progress_timeout_s, probed)) is not None:
                return stalled
            now_seen = activity.received()
            if now_seen != seen or not activity.in_flight:
                seen, last_evidence = now_seen, clock()
                continue
            if probe is None:
                probe = asyncio.ensure_future(answers(timeout_s))
            done, _ = await asyncio.wait({probe}, timeout=wait_s)
            if done:
                answered, probe = probe.result(), None  # a broken probe is the watchdog's own error
                if answered:
                    last_evidence = clock()
                    continue
            if activity.received() == seen and clock() - last_evidence >= timeout_s:  # none came meanwhile
                n = activity.in_flight
                streams = f"{n} stream{'s' if n != 1 else ''}"
                return (f"the server stopped answering: nothing arrived on any of {streams} "
                        f"and {probed()} was silent for {timeout_s:g} s")
    finally:
        if probe is not None:
            probe.cancel()


async def _settled(task: asyncio.Future) -> None:
    """Wait until the cancelled `task` has ended; an exception it ended with is retrieved (the caller
    reports its own), so asyncio never logs it as "never retrieved"."""
    await asyncio.wait({task})
    if not task.cancelled():
        task.exception()


async def run_watched(work: Coroutine[object, object, T], activity: StreamActivity,
                      watchdog: Callable[[StreamActivity], Awaitable[str]],
                      stop: Callable[[], Awaitable[BaseException]] | None = None) -> T:
    """`await work`, with `watchdog(activity)` beside it. When the watchdog returns first, its
    reason becomes `activity.verdict`, `work` is cancelled (with the reason as the cancel message)
    and awaited (it records its requests in flight), and ServerUnresponsive(reason) is raised.
    When `stop()` returns first (a failure beside the work: the samples file cannot be written),
    `work` is cancelled and awaited the same way and what `stop()` returned is raised.
    Cancelled from outside (Ctrl-C, another lane's failure), it cancels `work` with the same
    message, waits for it to record what it had, and goes on being cancelled."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(watchdog(activity))
    stopper = asyncio.ensure_future(stop()) if stop is not None else None
    try:
        await asyncio.wait({task, watcher} | ({stopper} if stopper else set()),
                           return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError as exc:
        task.cancel(*exc.args)
        await _settled(task)  # what it raised while stopping (a write that failed) is not the news
        raise
    finally:
        watcher.cancel()
        if stopper is not None and not stopper.done():
            stopper.cancel()
    if task.done():
        return task.result()
    if stopper is not None and stopper.done() and not stopper.cancelled():
        failure = stopper.result()
        task.cancel(str(failure))
        await _settled(task)
        raise failure
    if (broken := watcher.exception()) is not None:  # a broken watchdog is an error of its own: say so
        task.cancel()
        await _settled(task)
        raise broken
    reason = watcher.result()
    activity.verdict = reason
    task.cancel(reason)
    await asyncio.wait({task})
    if task.cancelled():
        raise ServerUnresponsive(reason)
    return task.result()  # it ended on its own in that very moment (or failed): that stands
