"""The fairness checks' workloads on a virtual clock: the requests the runner sends
(run/fairness.py's calibration, run/fairness_checks.py's six workloads, sized by
workload/fairness_plan.py) replayed on `scripted_time.Sim`, one Sim per check as the runner uses one
server, each recorded as the `RequestEvent` the load generator would write (loadgen.to_event).

Every stamp is the script's arithmetic (virtual ns), so a check judged on these events gives the same
figures on any host. What a real client adds is left out: no round trip (arrival = send = targeted),
a stream read as it is written, and prompts of exactly the plan's sizes (the runner's may grow by a
few tokens to fit a request id). The runner's pauses are kept where they decide when a request
arrives: `POLL_MS` (wait_for_tokens' poll), F2's 1 ms between sends, S3's 10 ms between the prompts.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from satbench.analysis.checks import check_verdict
from satbench.analysis.verdicts import Calibration, calibrate
from satbench.config.schema import (
    CheckName,
    FairnessConfig,
    LaneConfig,
    RuntimeConfig,
    ServerParams,
    WorkloadConfig,
)
from satbench.load.loadgen import server_timings
from satbench.records.events import Phase, RequestEvent, itl_ms
from satbench.run.fairness_checks import PAIR_GAP_S, SIZES_GAP_S, WATCH_TOKENS, f1_output
from satbench.run.fairness_traffic import POLL_S
from satbench.workload.fairness_plan import (
    CAL_PREFILLS,
    REFERENCES,
    S1_REFERENCES,
    FairnessPlan,
    make_plan,
    s3_prompt_tokens,
)
from tests.fakes.fairness_harness import FAIR
from tests.fakes.fake_scheduler import FakeRequest
from tests.fakes.fake_script import FakeScript
from tests.fakes.scripted_time import MS, Sim

POLL_MS = POLL_S * 1000.0
SEND_GAP_MS = SIZES_GAP_S * 1000.0


@dataclass
class Lane:
    """A lane on the fake (fairness_harness's: prompt 32, output 16, the script's slots and n_batch),
    its plan and config, and what its calibration measured on the virtual clock: `cal` as the verdicts
    read it, `lone_e2e_ms` (a lone request of the lane's size, end to end: F3's stagger) and
    `lone_itl_ms` (the lone decode's median ITL: F1's output); `cal_events`: the calibration's events."""

    script: FakeScript
    plan: FairnessPlan
    cfg: FairnessConfig
    cal_events: list[RequestEvent]
    cal: Calibration
    lone_e2e_ms: float
    lone_itl_ms: float | None


def lane(fairness: FairnessConfig | None = None, **knobs) -> Lane:
    """fairness_harness.FAIR with `knobs`, its plan, and the runner's calibration run on a Sim."""
    script = FakeScript(**{**FAIR, **knobs})
    cfg = fairness or FairnessConfig()
    conf = LaneConfig(workload=WorkloadConfig(prompt_tokens=32, output_tokens=16),
                      server=ServerParams(n_batch=script.n_batch), fairness=cfg,
                      runtime=RuntimeConfig(kind="url", model=None, url="http://127.0.0.1:1"))
    plan = make_plan(conf, script.n_slots)
    t = Traffic(script, plan, cfg)
    for i in range(CAL_PREFILLS):
        t.alone("CAL", "prefill", i, plan.calibration_prompt, 2)
    t.alone("CAL", "decode", 0, plan.prompt, plan.calibration_output)
    events = t.events()
    decode = events[-1]  # as FairnessRunner.calibration reads it
    gaps = itl_ms(decode)
    return Lane(script, plan, cfg, events, calibrate(events),
                (decode.end_ns - decode.sent_ns) / MS * plan.output / plan.calibration_output,
                statistics.median(gaps) if gaps else None)


def event(req: FakeRequest, check: str, role: str, *, level: int = 1, rep: int = 1, stream: int = 0,
          seq: int = 0, phase: Phase = "measured") -> RequestEvent:
    """The event the load generator writes for `req` (one chunk per token event, the server's timings)."""
    chunks = [(t, 1) for t in req.chunk_ns]
    return RequestEvent(lane="l", scenario="fairness", level=level, repetition=rep, stream=stream, seq=seq,
                        phase=phase, request_id=req.rid or "", prompt_tokens=req.prompt_n,
                        server_prompt_tokens=req.prompt_n, max_tokens=req.n_predict,
                        targeted_ns=req.arrival_ns, sent_ns=req.arrival_ns,
                        headers_ns=req.chunk_ns[0] if req.chunk_ns else None, end_ns=req.end_ns,
                        chunks=chunks, output_tokens=len(chunks), slot_id=req.slot,
                        timings=server_timings(req.timings()), check=check, role=role)


class Traffic:
    """run/fairness_traffic.CheckTraffic on one Sim: requests sent alone, beside others or as a closed
    loop, each kept with the tags its event gets (`events` once they have ended); `cal_events`: the
    lane's calibration, which the runner's judge reads beside them (`verdict`)."""

    def __init__(self, script: FakeScript, plan: FairnessPlan, cfg: FairnessConfig,
                 cal_events: Sequence[RequestEvent] = ()):
        self.sim, self.plan, self.cfg, self.cal_events = Sim(script), plan, cfg, list(cal_events)
        self._sent: list[tuple[FakeRequest, dict]] = []

    def send(self, check: str, role: str, seq: int, prompt: int, output: int, *, at_ms: float | None = None,
             then: Callable[[FakeRequest, Sim], None] | None = None, **tags) -> FakeRequest:
        """A request arriving at `at_ms` (default now); `tags`: level, rep, stream, phase."""
        at = self.sim.now_ms if at_ms is None else at_ms
        req = self.sim.send(at, f"{check}-{role}-{len(self._sent)}", prompt, output, then=then)
        self._sent.append((req, dict(check=check, role=role, seq=seq, **tags)))
        return req

    def alone(self, check: str, role: str, seq: int, prompt: int, output: int, **tags) -> FakeRequest:
        """`send` on an idle server, then run until it has ended (the runner awaits it)."""
        req = self.send(check, role, seq, prompt, output, **tags)
        self.sim.run()
        return req

    def watch(self, done: Callable[[], bool], from_ms: float | None = None) -> float:
        """Step the clock POLL_MS at a time from `from_ms` (default now) until `done()`; the poll's time,
        ms (when the runner acts)."""
        sim = self.sim
        at = sim.now_ms if from_ms is None else from_ms
        while not done():
            assert sim._arrivals or sim.engine._running, "nothing left to run: it can never be done"
            at += POLL_MS
            sim.run(until_ms=at)
        return at

    def until_ended(self, req: FakeRequest) -> float:
        """`watch` until `req` has ended; its end, ms (the runner's awaited send returns then)."""
        self.watch(lambda: req.end_ns > 0)
        return req.end_ns / MS

    def wait_for_tokens(self, reqs: list[FakeRequest], tokens: int, from_ms: float | None = None) -> float:
        """run/fairness_traffic.wait_for_tokens from `from_ms`: until each has `tokens` tokens or ended."""
        return self.watch(lambda: all(len(r.chunk_ns) >= tokens or r.end_ns for r in reqs), from_ms)

    def decoders(self, check: str, n: int, output: int, rep: int) -> list[FakeRequest]:
        return [self.send(check, "decoder", i, self.plan.prompt, output, level=n, rep=rep, stream=i)
                for i in range(n)]

    def closed_loop(self, check: str, streams: int, per_stream: int, prompt: int, output: int, rep: int,
                    stagger_ms: float = 0.0) -> None:
        """load/loadgen.run_level: each stream's warmup (stream i starts i·stagger_ms late), then measured
        requests from one shared queue, the next sent as the last one ends; run until all have ended."""
        queue = deque(range(streams * per_stream))
        start = self.sim.now_ms

        def again(stream: int) -> Callable[[FakeRequest, Sim], None]:
            def then(req: FakeRequest, sim: Sim) -> None:
                if queue:
                    self.send(check, "measured", queue.popleft(), prompt, output, at_ms=sim.now_ms,
                              then=again(stream), level=streams, rep=rep, stream=stream)
            return then

        for i in range(streams):
            self.send(check, "warmup", i, prompt, output, at_ms=start + i * stagger_ms, then=again(i),
                      level=streams, rep=rep, stream=i, phase="warmup")
        self.sim.run()

    def rounds(self, check: CheckName, one_round: Callable[[int], None]) -> None:
        """run/fairness_checks.rounds: the base rounds, then one more while the verdict so far is
        marginal (analysis.checks.check_verdict, the runner's judge, with the calibration), up to the cap."""
        base, cap = self.cfg.rounds(check)
        for rep in range(1, base + 1):
            one_round(rep)
        rep = base
        while rep < cap and self.verdict(check) == "marginal":
            rep += 1
            one_round(rep)

    def verdict(self, check: CheckName) -> str:
        """The check's verdict kind on the events so far and the calibration's, as the runner judges."""
        return check_verdict(check, self.cal_events + self.events(), self.plan, self.cfg).verdict

    def requests(self, role: str) -> list[tuple[FakeRequest, dict]]:
        """The requests sent with `role`, each with its tags (check, seq, level, rep, stream, phase)."""
        return [(req, tags) for req, tags in self._sent if tags["role"] == role]

    def events(self) -> list[RequestEvent]:
        """The events of the requests that have ended, in send order."""
        out = []
        for req, tags in self._sent:
            if req.end_ns:
                tags = dict(tags)
                out.append(event(req, tags.pop("check"), tags.pop("role"), **tags))
        return out


# -- each check's workload, as run/fairness_checks.py sends it -----------------------------------------
def _traffic(ln: Lane) -> Traffic:
    return Traffic(ln.script, ln.plan, ln.cfg, ln.cal_events)


def equal_requests(ln: Lane) -> Traffic:
    """F1: the plan's streams, closed loop, of f1_output's requests at the calibrated lone ITL."""
    t, p = _traffic(ln), ln.plan
    output = f1_output(p, ln.lone_itl_ms)
    per_stream = ln.cfg.f1_requests_per_stream
    t.rounds("F1", lambda rep: t.closed_loop("F1", p.f1_streams, per_stream, p.prompt, output, rep))
    return t


def mixed_sizes(ln: Lane) -> Traffic:
    """F2: each size alone (REFERENCES sets), then per round all sizes, biggest first, 1 ms apart."""
    t, sizes = _traffic(ln), ln.plan.f2_sizes
    n = len(sizes)
    for rep in range(REFERENCES):
        for i, (prompt, output) in enumerate(sizes):
            t.alone("F2", "alone", i, prompt, output, level=n, rep=rep + 1)

    def together(rep: int) -> None:
        order = sorted(range(n), key=lambda i: -(sizes[i][0] + sizes[i][1]))
        start = t.sim.now_ms
        for k, i in enumerate(order):
            t.send("F2", "together", i, *sizes[i], at_ms=start + k * SEND_GAP_MS, level=n, rep=rep, stream=i)
        t.sim.run()
    t.rounds("F2", together)
    return t


def backlogged_clients(ln: Lane) -> Traffic:
    """F3: the plan's clients, closed loop, started lone_e2e ÷ clients apart."""
    t, p = _traffic(ln), ln.plan
    per_client, stagger = ln.cfg.f3_requests_per_client, ln.lone_e2e_ms / p.f3_clients
    t.rounds("F3", lambda rep: t.closed_loop("F3", p.f3_clients, per_client, p.prompt, p.output, rep,
                                             stagger_ms=stagger))
    return t


def decode_stall(ln: Lane) -> Traffic:
    """S1: the long prompt alone, then per round the decoders and, once each has WATCH_TOKENS tokens,
    the same prompt injected among them."""
    t, p = _traffic(ln), ln.plan
    for i in range(S1_REFERENCES):
        t.alone("S1", "solo", i, p.s1_prompt, 4)

    def injection(rep: int) -> None:
        decoders = t.decoders("S1", p.s1_decoders, p.s1_decoder_output, rep)
        at = t.wait_for_tokens(decoders, WATCH_TOKENS)
        t.send("S1", "injected", 0, p.s1_prompt, 4, at_ms=at, level=p.s1_decoders + 1, rep=rep,
               stream=p.s1_decoders)
        t.sim.run()
    t.rounds("S1", injection)
    return t


def prompt_admission(ln: Lane) -> Traffic:
    """S2: the short probe alone (REFERENCES), then per round the decoders and, once steady, the
    probes one at a time, each followed by three more decoder tokens."""
    t, p = _traffic(ln), ln.plan
    short = max(8, min(32, p.prompt))
    for i in range(REFERENCES):
        t.alone("S2", "solo", i, short, 4)

    def probing(rep: int) -> None:
        decoders = t.decoders("S2", p.s2_decoders, p.s2_decoder_output, rep)
        at = t.wait_for_tokens(decoders, WATCH_TOKENS)
        for i in range(ln.cfg.s2_probes):
            probe = t.send("S2", "probe", i, short, 4, at_ms=at, level=p.s2_decoders + 1, rep=rep,
                           stream=p.s2_decoders)
            end_ms = t.until_ended(probe)
            done = min(sum(c <= probe.end_ns for c in d.chunk_ns) for d in decoders)  # tokens by its end
            at = t.wait_for_tokens(decoders, done + 3, from_ms=end_ms)
        t.sim.run()
    t.rounds("S2", probing)
    return t


def prompt_vs_prompt(ln: Lane) -> Traffic:
    """S3: the prompt (sized at the calibrated prefill rate) alone (REFERENCES), then per round two of
    it PAIR_GAP_S apart."""
    t, p = _traffic(ln), ln.plan
    prompt = s3_prompt_tokens(p, ln.cfg, ln.cal.prefill_tok_per_s)
    for i in range(REFERENCES):
        t.alone("S3", "solo", i, prompt, p.s3_output)

    def pair(rep: int) -> None:
        start = t.sim.now_ms
        t.send("S3", "first", 0, prompt, p.s3_output, level=2, rep=rep, stream=0)
        t.send("S3", "second", 1, prompt, p.s3_output, at_ms=start + PAIR_GAP_S * 1000, level=2, rep=rep,
               stream=1)
        t.sim.run()
    t.rounds("S3", pair)
    return t
