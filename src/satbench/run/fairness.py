"""The workloads of the six checks, on one lane's server; every request becomes a raw event
(scenario "fairness", tagged with its check, role and round as `repetition`), so the verdicts can be
recomputed.

Each check measures its own references (a request alone, the decoders before an injection),
so its bound comes from this lane on this machine, not from a constant. Each runs its base rounds,
then one more round at a time while its verdict, computed from the events so far by the function
`analyze` uses (handed in as a `FairnessJudge`: the measuring side imports no analysis), is marginal,
up to its cap (FairnessConfig.rounds).
The calibration sizes what depends on the lane's speed: F1's output (F1_DECODE_TARGET_MS of decode
alone) and S3's prompts (`s3_prefill_ms` of prefill alone); the verdicts read the sizes from the
events.
"""

from __future__ import annotations

import asyncio
import math
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from satbench.config.schema import CheckName, FairnessConfig, WorkloadConfig
from satbench.errors import LevelFailedError, SatbenchError
from satbench.http.client import CompletionRequest, StreamOutcome
from satbench.http.errors import RequestFailed
from satbench.load.liveness import ServerUnresponsive, StreamActivity
from satbench.load.loadgen import LevelPlan, run_level, run_recorded, to_event
from satbench.records.events import RequestEvent, itl_ms
from satbench.records.writer import JsonlWriter
from satbench.run.lane_session import LaneSession, Progress
from satbench.workload.builder import WorkloadBuilder
from satbench.workload.fairness_plan import (
    CAL_PREFILLS,
    F1_DECODE_TARGET_MS,
    REFERENCE_SETS,
    REFERENCES,
    S1_REFERENCES,
    FairnessPlan,
    check_request_count,
    check_requests,
    in_flight,
    request_count,
    s3_prompt_tokens,
)

WATCH_TOKENS = 8  # decoders are "steady" once each has this many tokens
PAIR_GAP_S = 0.010  # S3: the second prompt follows the first by 10 ms
F1_OUTPUT_MAX = 1024  # F1's requests stay this short however fast the server decodes


class _Kept:
    """The run's events file, keeping a copy of the request events written (the verdicts so far)."""

    def __init__(self, sink: JsonlWriter, kept: list[RequestEvent]) -> None:
        self.sink, self.kept = sink, kept

    def write(self, record) -> None:
        self.sink.write(record)
        if isinstance(record, RequestEvent):
            self.kept.append(record)

    def close(self) -> None:
        self.sink.close()


class FairnessJudge(Protocol):
    """What the runner asks of the deriving side (satbench.pipeline provides it)."""

    def verdict(self, check: CheckName, events: Sequence[RequestEvent], plan: FairnessPlan,
                cfg: FairnessConfig) -> str:
        """The check's verdict kind (pass, fail, marginal, inconclusive) from the events so far."""

    def prefill_tok_per_s(self, calibration: Sequence[RequestEvent]) -> float | None:
        """The lane's prefill rate from its calibration requests, as the verdicts read it."""

    def references_unsteady(self, check: CheckName, events: Sequence[RequestEvent]) -> bool:
        """Whether the check's latest lone references are too far apart to serve as its reference."""


class FairnessRunner:
    def __init__(self, session: LaneSession, plan: FairnessPlan, sink: JsonlWriter, progress: Progress,
                 nonce: str, judge: FairnessJudge, stop_at_fail: bool = False) -> None:
        self.s, self.plan, self.progress, self.judge = session, plan, progress, judge
        self.stop_at_fail = stop_at_fail  # checks before the sweep: stop once one fails (run_all)
        self.events: list[RequestEvent] = []  # this session's fairness events, as written
        self.sink = _Kept(sink, self.events)
        self.lane = session.lane.name
        self.nonce = nonce
        self.builder: WorkloadBuilder | None = None
        self.lone_e2e_s = 0.0
        self.lone_itl_ms: float | None = None
        self.prefill_tok_per_s: float | None = None
        self.activity: StreamActivity | None = None  # the running check's requests (its watchdog's view)
        self._spawned: set[asyncio.Task] = set()

    def _spawn(self, coro) -> asyncio.Task:
        """A request sent beside others; one left when its check stops is stopped (and recorded) with it."""
        task = asyncio.create_task(coro)
        self._spawned.add(task)
        task.add_done_callback(self._spawned.discard)
        return task

    async def _stop_spawned(self) -> None:
        left = list(self._spawned)
        for task in left:
            task.cancel()
        await asyncio.gather(*left, return_exceptions=True)

    async def prepare(self) -> None:
        assert self.s.workload is not None
        # the lane's tokenizer and endpoint, but always unique prefixes, no prompt cache and the plan's
        # fixed sizes (a lane whose lengths are drawn gives the plan its means: fairness_plan.py)
        cfg = WorkloadConfig(prompt_tokens=self.plan.prompt, output_tokens=self.plan.output,
                             endpoint=self.s.lane.workload.endpoint)
        self.builder = self.s.workload.derive(cfg, self.nonce)
        await self.builder.prepare()

    async def _req(self, check: str, role: str, seq: int, prompt: int, output: int) -> CompletionRequest:
        """A request whose id (and unique prompt prefix) is short: nonce, check, role, number.
        A prompt too short for that prefix grows to fit (the event records its real length)."""
        assert self.builder is not None
        return await self.builder.one(f"{self.nonce}{check}{role}{seq}", prompt, output, grow=True)

    def _level_plan(self, check: str, level: int, rep: int, warmup=(), measured=()) -> LevelPlan:
        return LevelPlan(lane=self.lane, level=level, repetition=rep, warmup=list(warmup),
                         measured=list(measured), scenario="fairness", check=check,
                         session=self.s.session_index)

    async def send(self, check: str, role: str, seq: int, req: CompletionRequest, *, level: int = 1,
                   rep: int = 1, stream: int = 0, out: StreamOutcome | None = None) -> RequestEvent:
        assert self.s.client is not None
        targeted = time.perf_counter_ns()
        plan = self._level_plan(check, level, rep)
        event = await run_recorded(self.s.client, req,
                                   lambda o: to_event(plan, stream, seq, "measured", req, targeted, o,
                                                      role=role),
                                   self.sink, out=out, activity=self.activity)
        self.progress.request_done(event)
        return event

    async def _rounds(self, check: CheckName, one_round: Callable[[int], Awaitable[None]]) -> None:
        """The check's base rounds, then one more at a time while its verdict on the events so far
        is marginal, up to its cap."""
        cfg = self.s.lane.fairness
        base, cap = cfg.rounds(check)
        for rep in range(1, base + 1):
            await one_round(rep)
        rep = base
        while rep < cap and self.judge.verdict(check, self.events, self.plan, cfg) == "marginal":
            rep += 1
            await one_round(rep)
        _, per_round = check_requests(self.plan, cfg).get(check, (0, 0))
        self.progress.skip(per_round * (cap - rep))  # the top-ups a decided check did not need

    async def _references(self, check: CheckName, per_set: int,
                          one_set: Callable[[int], Awaitable[None]]) -> None:
        """The check's lone references, a set of `per_set` requests at a time: another set (role
        `…_again`, analysis.checks.REFERENCE_ROLES) while the latest is too unsteady to serve (the
        verdict judges the last), up to REFERENCE_SETS."""
        for k in range(REFERENCE_SETS):
            if k:
                self.progress.skip(-per_set)  # not in the planned total
            await one_set(k)
            if not self.judge.references_unsteady(check, self.events):
                return

    async def _closed_loop(self, check: str, streams: int, per_stream: int, prompt: int, output: int,
                           rep: int, stagger_s: float = 0.0) -> None:
        assert self.s.client is not None
        warm = [await self._req(check, f"warmup{rep}-", i, prompt, output) for i in range(streams)]
        meas = [await self._req(check, f"measured{rep}-", i, prompt, output)
                for i in range(streams * per_stream)]
        self.progress.level(self.lane, f"fairness {check}", streams, rep)
        await run_level(self.s.client, self._level_plan(check, streams, rep, warm, meas), self.sink,
                        on_done=self.progress.request_done, activity=self.activity,
                        start_offsets_s=[i * stagger_s for i in range(streams)] if stagger_s else None)

    async def _watch(self, outs: list[StreamOutcome], tokens: int, timeout_s: float = 120.0) -> None:
        """Wait until every watched stream has received `tokens` tokens (or finished)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(o.output_tokens >= tokens or o.end_ns for o in outs):
                return
            await asyncio.sleep(0.002)

    async def _decoders(self, check: str, n: int, output: int,
                        rep: int) -> tuple[list[StreamOutcome], list[asyncio.Task]]:
        outs = [StreamOutcome() for _ in range(n)]
        reqs = [await self._req(check, f"decoder{rep}-", i, self.plan.prompt, output) for i in range(n)]
        tasks = [self._spawn(self.send(check, "decoder", i, r, level=n, rep=rep, stream=i, out=o))
                 for i, (r, o) in enumerate(zip(reqs, outs, strict=True))]
        return outs, tasks

    # -- the checks ------------------------------------------------------------------------
    async def calibration(self) -> None:
        p = self.plan
        self.progress.level(self.lane, "fairness calibration", 1, 1)
        for i in range(CAL_PREFILLS):
            req = await self._req("CAL", "prefill", i, p.calibration_prompt, 2)
            await self.send("CAL", "prefill", i, req)
        req = await self._req("CAL", "decode", 0, p.prompt, p.calibration_output)
        e = await self.send("CAL", "decode", 0, req)
        # one lone request of the lane's size, end to end (used to stagger F3's clients)
        self.lone_e2e_s = (e.end_ns - e.sent_ns) / 1e9 * p.output / p.calibration_output
        gaps = itl_ms(e)
        self.lone_itl_ms = statistics.median(gaps) if gaps else None
        self.prefill_tok_per_s = self.judge.prefill_tok_per_s([e for e in self.events if e.check == "CAL"])

    def f1_output(self) -> int:
        """F1's output tokens: long enough that a request decodes F1_DECODE_TARGET_MS even alone
        (at the lone decode's ITL), so neighbours share intervals the verdict can compare; at least
        the plan's, at most F1_OUTPUT_MAX and what the per-slot context leaves."""
        p = self.plan
        wanted = p.f1_output
        if self.lone_itl_ms:
            wanted = max(wanted, math.ceil(F1_DECODE_TARGET_MS / self.lone_itl_ms))
        room = (p.per_slot_ctx - 16 - p.prompt) if p.per_slot_ctx else wanted
        return max(2, min(wanted, max(F1_OUTPUT_MAX, p.f1_output), room))

    async def equal_requests(self) -> None:
        n, output = self.plan.f1_streams, self.f1_output()
        if n >= 2:
            per_stream = self.s.lane.fairness.f1_requests_per_stream
            await self._rounds("F1", lambda rep: self._closed_loop("F1", n, per_stream, self.plan.prompt,
                                                                   output, rep))

    async def mixed_sizes(self) -> None:
        sizes = self.plan.f2_sizes
        if len(sizes) < 2:
            return
        self.progress.level(self.lane, "fairness F2", len(sizes), 1)
        _, cap = self.s.lane.fairness.rounds("F2")
        tags = [f"alone{r}-" for r in range(REFERENCES)] + [f"together{r}-" for r in range(1, cap + 1)]
        built = {(tag, i): await self._req("F2", tag, i, *sizes[i])
                 for tag in tags for i in range(len(sizes))}
        # a prompt too short for its id grows to fit, by as much as the id is long: every request of a
        # size gets its longest prompt, so that a size alone and together is the same request
        longest = {i: max(r.prompt_tokens for (_, j), r in built.items() if j == i)
                   for i in range(len(sizes))}
        for (tag, i), r in built.items():
            if r.prompt_tokens < longest[i]:
                built[tag, i] = await self._req("F2", tag, i, longest[i], sizes[i][1])
        async def alone(k: int) -> None:  # each size alone: its median is the reference
            for rep in range(k * REFERENCES, (k + 1) * REFERENCES):
                for i in range(len(sizes)):
                    tag = f"alone{rep}-"
                    req = built.get((tag, i)) or await self._req("F2", tag, i, longest[i], sizes[i][1])
                    await self.send("F2", "alone_again" if k else "alone", i, req, level=len(sizes),
                                    rep=rep + 1)
        await self._references("F2", REFERENCES * len(sizes), alone)

        async def together(rep: int) -> None:
            self.progress.level(self.lane, "fairness F2", len(sizes), rep)
            order = sorted(range(len(sizes)), key=lambda i: -(sizes[i][0] + sizes[i][1]))  # biggest first
            tasks = []
            for i in order:
                tasks.append(self._spawn(self.send("F2", "together", i, built[f"together{rep}-", i],
                                                   level=len(sizes), rep=rep, stream=i)))
                await asyncio.sleep(0.001)
            await asyncio.gather(*tasks)
        await self._rounds("F2", together)

    async def backlogged_clients(self) -> None:
        """Clients start staggered over one request's duration, as backlogged clients arrive in
        practice; equal requests started together would finish together forever, and the order in
        which a scheduler picks among waiters would never matter."""
        c = self.plan.f3_clients
        per_client = self.s.lane.fairness.f3_requests_per_client
        await self._rounds("F3", lambda rep: self._closed_loop("F3", c, per_client, self.plan.prompt,
                                                               self.plan.output, rep,
                                                               stagger_s=self.lone_e2e_s / c))

    async def decode_stall(self) -> None:
        p = self.plan
        if p.slots < 2:
            return
        self.progress.level(self.lane, "fairness S1", p.s1_decoders + 1, 1)
        for i in range(S1_REFERENCES):
            await self.send("S1", "solo", i, await self._req("S1", "solo", i, p.s1_prompt, 4))

        async def injection(rep: int) -> None:
            self.progress.level(self.lane, "fairness S1", p.s1_decoders + 1, rep)
            outs, tasks = await self._decoders("S1", p.s1_decoders, p.s1_decoder_output, rep)
            await self._watch(outs, WATCH_TOKENS)
            await self.send("S1", "injected", 0, await self._req("S1", f"injected{rep}-", 0, p.s1_prompt, 4),
                            level=p.s1_decoders + 1, rep=rep, stream=p.s1_decoders)
            await asyncio.gather(*tasks)
        await self._rounds("S1", injection)

    async def prompt_admission(self) -> None:
        p, probes = self.plan, self.s.lane.fairness.s2_probes
        if p.slots < 2:
            return
        self.progress.level(self.lane, "fairness S2", p.s2_decoders + 1, 1)
        short = max(8, min(32, p.prompt))
        for i in range(REFERENCES):
            await self.send("S2", "solo", i, await self._req("S2", "solo", i, short, 4))

        async def probing(rep: int) -> None:
            self.progress.level(self.lane, "fairness S2", p.s2_decoders + 1, rep)
            outs, tasks = await self._decoders("S2", p.s2_decoders, p.s2_decoder_output, rep)
            await self._watch(outs, WATCH_TOKENS)
            for i in range(probes):
                await self.send("S2", "probe", i, await self._req("S2", f"probe{rep}-", i, short, 4),
                                level=p.s2_decoders + 1, rep=rep, stream=p.s2_decoders)
                done = min(o.output_tokens for o in outs)
                await self._watch(outs, done + 3)  # let the decoders run a few iterations between probes
            await asyncio.gather(*tasks)
        await self._rounds("S2", probing)

    async def prompt_vs_prompt(self) -> None:
        p = self.plan
        if p.slots < 2:
            return
        self.progress.level(self.lane, "fairness S3", 2, 1)
        prompt = s3_prompt_tokens(p, self.s.lane.fairness, self.prefill_tok_per_s)
        async def alone(k: int) -> None:  # the verdict knows how much a lone prefill varies by itself
            for i in range(k * REFERENCES, (k + 1) * REFERENCES):
                await self.send("S3", "solo_again" if k else "solo", i,
                                await self._req("S3", "solo", i, prompt, p.s3_output))
        await self._references("S3", REFERENCES, alone)

        async def pair(rep: int) -> None:
            first = await self._req("S3", f"first{rep}-", 0, prompt, p.s3_output)
            second = await self._req("S3", f"second{rep}-", 0, prompt, p.s3_output)
            t1 = self._spawn(self.send("S3", "first", 0, first, level=2, rep=rep, stream=0))
            await asyncio.sleep(PAIR_GAP_S)
            t2 = self._spawn(self.send("S3", "second", 1, second, level=2, rep=rep, stream=1))
            await asyncio.gather(t1, t2)
        await self._rounds("S3", pair)

    async def run_all(self) -> None:
        """Calibration, then the lane's chosen checks, narrowest first (F1, F2, F3, S1, S2, S3 among
        equals): a check that puts more requests in flight than the server can bear (b11434 died on
        a 64-expert MoE at 64) then costs only itself and the wider ones. A server that is not
        llama.cpp is sent nothing: its slots and n_batch are unknown, so every check would be
        inconclusive anyway (analyze says so from the recorded runtime), and the load would be wasted.
        Each check (and the calibration) runs under the lane session's liveness watchdog: a server
        that stops answering fails the check within its bound (liveness.py).
        With `stop_at_fail` (the checks that cap an adaptive sweep), a check that fails at c in flight
        ends the run: every check left puts c or more in flight, so it could forbid only levels already
        forbidden (analysis/checks.lane_verdicts names them "not run" and why)."""
        if not self.s.runtime_info().llamacpp:
            self.progress.skip(request_count(self.plan, self.s.lane))
            return
        await self.prepare()
        await self._watched("calibration", 1, self.calibration)
        wanted = self.s.lane.fairness.checks
        checks = [(name, check) for name, check in self.check_runs().items() if name in wanted]
        ordered = sorted(checks, key=lambda c: in_flight(self.plan, c[0]))  # stable sort
        for i, (name, check) in enumerate(ordered):
            width = in_flight(self.plan, name)
            try:
                await self._watched(name, width, check)
            except LevelFailedError:
                raise  # the watchdog's verdict says it all
            except (SatbenchError, RequestFailed) as exc:
                await self.s.check_alive(name, width, cause=exc)  # the server died mid-check: say so
                raise
            await self.s.check_alive(name, width)  # a dead server fails loudly, not as verdicts
            cfg = self.s.lane.fairness
            if self.stop_at_fail and self.judge.verdict(name, self.events, self.plan, cfg) == "fail":
                self.progress.skip(sum(check_request_count(self.plan, cfg, c) for c, _ in ordered[i + 1:]))
                return

    def check_runs(self) -> dict[str, Callable[[], Awaitable[None]]]:
        """Each check's name → the coroutine function that sends its workload."""
        return {"F1": self.equal_requests, "F2": self.mixed_sizes, "F3": self.backlogged_clients,
                "S1": self.decode_stall, "S2": self.prompt_admission, "S3": self.prompt_vs_prompt}

    async def _watched(self, name: str, width: int, check) -> None:
        """One check under the liveness watchdog; LevelFailedError when the server stopped answering.
        Requests it left in flight are stopped (and recorded) when it ends."""
        self.activity = StreamActivity()
        try:
            await self.s.watched(check(), self.activity)
        except ServerUnresponsive as exc:
            raise self.s.check_failed(name, width, self.s.why_unresponsive(exc)) from None
        finally:
            await self._stop_spawned()
