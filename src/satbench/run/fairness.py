"""The fairness checks on one lane's server: the calibration, then the lane's chosen checks in order
(`FairnessRunner`; each check's workload is run.fairness_checks', its requests run.fairness_traffic's).
Every request becomes a raw event
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

import statistics
from collections.abc import Callable, Coroutine

from satbench.errors import LevelFailedError, SatbenchError
from satbench.http.errors import RequestFailed
from satbench.load.liveness import ServerUnresponsive, StreamActivity
from satbench.records.events import itl_ms
from satbench.records.writer import JsonlWriter
from satbench.run.fairness_checks import (
    backlogged_clients,
    decode_stall,
    equal_requests,
    f1_output,
    mixed_sizes,
    prompt_admission,
    prompt_vs_prompt,
)
from satbench.run.fairness_traffic import CheckTraffic, FairnessJudge
from satbench.run.lane_session import LaneSession, Progress
from satbench.workload.fairness_plan import (
    CAL_PREFILLS,
    FairnessPlan,
    check_request_count,
    in_flight,
    request_count,
)

CheckRun = Callable[[], Coroutine[object, object, None]]  # a check's workload, sent when awaited


class FairnessRunner:
    """The calibration and the lane's chosen checks on one lane session's server, sized by `plan`,
    in order (`run_all`); their requests are `traffic`'s (run.fairness_traffic), each check's workload
    run.fairness_checks'. The calibration sets `lone_e2e_s` (one lone request of the lane's size, end
    to end), `lone_itl_ms` (its median ITL) and `prefill_tok_per_s` (as the verdicts read it)."""

    def __init__(self, session: LaneSession, plan: FairnessPlan, sink: JsonlWriter, progress: Progress,
                 nonce: str, judge: FairnessJudge, stop_at_fail: bool = False) -> None:
        self.s, self.plan, self.progress, self.judge = session, plan, progress, judge
        self.stop_at_fail = stop_at_fail  # checks before the sweep: stop once one fails (run_all)
        self.traffic = CheckTraffic(session, plan, sink, progress, nonce, judge)
        self.events = self.traffic.events  # this session's fairness events, as written
        self.lane = session.lane.name
        self.lone_e2e_s = 0.0
        self.lone_itl_ms: float | None = None
        self.prefill_tok_per_s: float | None = None

    async def prepare(self) -> None:
        await self.traffic.prepare()

    async def calibration(self) -> None:
        t, p = self.traffic, self.plan
        self.progress.level(self.lane, "fairness calibration", 1, 1)
        for i in range(CAL_PREFILLS):
            req = await t.req("CAL", "prefill", i, p.calibration_prompt, 2)
            await t.send("CAL", "prefill", i, req)
        req = await t.req("CAL", "decode", 0, p.prompt, p.calibration_output)
        e = await t.send("CAL", "decode", 0, req)
        # one lone request of the lane's size, end to end (used to stagger F3's clients)
        self.lone_e2e_s = (e.end_ns - e.sent_ns) / 1e9 * p.output / p.calibration_output
        gaps = itl_ms(e)
        self.lone_itl_ms = statistics.median(gaps) if gaps else None
        self.prefill_tok_per_s = self.judge.prefill_tok_per_s([e for e in self.events if e.check == "CAL"])

    def f1_output(self) -> int:
        """F1's output tokens at the lone decode's ITL (`fairness_checks.f1_output`)."""
        return f1_output(self.plan, self.lone_itl_ms)

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
                await self.s.watch.check_alive(name, width, cause=exc)  # the server died mid-check: say so
                raise
            await self.s.watch.check_alive(name, width)  # a dead server fails loudly, not as verdicts
            cfg = self.s.lane.fairness
            if self.stop_at_fail and self.judge.verdict(name, self.events, self.plan, cfg) == "fail":
                self.progress.skip(sum(check_request_count(self.plan, cfg, c) for c, _ in ordered[i + 1:]))
                return

    def check_runs(self) -> dict[str, CheckRun]:
        """Each check's name → the coroutine function that sends its workload."""
        t = self.traffic
        return {"F1": lambda: equal_requests(t, self.f1_output()), "F2": lambda: mixed_sizes(t),
                "F3": lambda: backlogged_clients(t, self.lone_e2e_s), "S1": lambda: decode_stall(t),
                "S2": lambda: prompt_admission(t), "S3": lambda: prompt_vs_prompt(t, self.prefill_tok_per_s)}

    async def _watched(self, name: str, width: int, check: CheckRun) -> None:
        """One check under the liveness watchdog; LevelFailedError when the server stopped answering.
        Requests it left in flight are stopped (and recorded) when it ends."""
        t, watch = self.traffic, self.s.watch
        t.activity = StreamActivity()
        try:
            await watch.watched(check(), t.activity)
        except ServerUnresponsive as exc:
            raise watch.check_failed(name, width, watch.why_unresponsive(exc)) from None
        finally:
            await t.stop_spawned()
