"""One level's result: every metric of docs/metrics.md with its sample count, CI and flags.

Pure function of the raw records (`summarize_level`); `analyze` calls it per lane and level.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from satbench.config.schema import design_minimum_requests
from satbench.metrics import latency, memory, occupancy, throughput
from satbench.metrics.flags import Flag, FlagKind
from satbench.metrics.gpu import gpu_use
from satbench.metrics.level_result import (
    Counts,
    Latency,
    LevelContext,
    LevelResult,
    Memory,
    Occupancy,
    RepetitionResult,
    Throughput,
)
from satbench.metrics.little import littles_law
from satbench.metrics.slo import goodput_req_per_s, slo_attainment, slo_met
from satbench.metrics.stats import distribution, mean_estimate, percentile
from satbench.metrics.unavailable import (
    cpu_failures,
    endpoint_failures,
    nvml_failure,
    unavailable_figures,
)
from satbench.metrics.window import SteadyWindow, steady_window
from satbench.records.events import (
    CANCELLED,
    LevelMark,
    MetricsSample,
    ProcessSample,
    RequestEvent,
    SlotsSample,
    itl_ms,
)
from satbench.records.samples import LaneSamples, SampleColumns, lane_samples


@dataclass
class _Window:
    """A repetition's steady window, its successful requests that ended in it (`done`), and the
    inter-token gaps of those, in the same order (ms)."""

    window: SteadyWindow
    done: list[RequestEvent]
    itl_ms: list[float]


def _repetition(
    rep: int, events: list[RequestEvent], end_mark: LevelMark | None, n: int
) -> tuple[RepetitionResult, _Window | None]:
    measured = [e for e in events if e.phase == "measured"]
    res = RepetitionResult(
        repetition=rep,
        status=end_mark.status if end_mark else "incomplete",
        status_reason=end_mark.reason if end_mark else "no level_end mark (run stopped)",
        requests_measured=len(measured),
        errors=sum(1 for e in measured if not e.ok),
        retries=sum(e.retries for e in events),
    )
    win, why = steady_window(events, n)
    if win is None:
        res.no_window_reason = why
        return res, None
    res.window_start_ns, res.window_end_ns, res.window_s = win.start_ns, win.end_ns, win.duration_s
    res.output_tokens_in_window = throughput.output_tokens_in_window(events, win)
    res.throughput_streams = throughput.throughput_streams(events, win)
    res.output_tok_per_s = throughput.output_tok_per_s(events, win, n)
    res.total_tok_per_s = throughput.total_tok_per_s(events, win, n)
    res.req_per_s = throughput.req_per_s(events, win, n)
    done = throughput.completed_in_window(events, win)
    gaps = [g for e in done for g in itl_ms(e)]
    res.requests_completed_in_window = len(done)
    res.p95_ttft_ms = _p95([v for e in done if (v := latency.ttft_ms(e)) is not None])
    res.p95_itl_ms = _p95(gaps)
    res.p95_e2e_ms = _p95([latency.e2e_ms(e) for e in done])
    return res, _Window(win, done, gaps)


def _p95(values: list[float]) -> float | None:
    """p95 (linear interpolation) of one repetition's sample; None when it is empty."""
    return percentile(values, 95) if values else None


@dataclass
class _OccupancyReadings:
    """A level's occupancy readings: one entry per repetition with a steady window (the time- and
    decode-weighted busy slots, why the latter is missing, the client's requests in flight), the
    sources of the time-weighted figure, every `requests_deferred` reading in the windows, and the
    coarse-sampling notes."""

    time_weighted: list[float | None] = field(default_factory=list)
    sources: set[str] = field(default_factory=set)
    decode_weighted: list[float | None] = field(default_factory=list)
    decode_weighted_why: list[str | None] = field(default_factory=list)
    client_in_flight: list[float | None] = field(default_factory=list)
    deferred: list[float] = field(default_factory=list)
    sparse: list[str | None] = field(default_factory=list)


def _window_mean(values: list[float | None]) -> float | None:
    good = [v for v in values if v is not None]
    return sum(good) / len(good) if good else None


def summarize_level(
    ctx: LevelContext,
    events: Sequence[RequestEvent],
    marks: Sequence[LevelMark],
    samples: LaneSamples | Sequence[MetricsSample | SlotsSample | ProcessSample],
) -> LevelResult:
    """All metrics of one level, pooled over its repetitions (throughput CI across repetitions).
    `samples`: the lane's in the level's scenario (the level's are found by time)."""
    n = ctx.level
    reps = sorted({e.repetition for e in events} | {m.repetition for m in marks})
    lane = lane_samples(samples)
    metrics_s, slots_s, proc_s = lane.metrics, lane.slots, lane.process
    rep_results: list[RepetitionResult] = []
    windows: list[SteadyWindow] = []
    in_window: list[RequestEvent] = []
    in_window_itl_ms: list[float] = []
    failed_in_window: list[RequestEvent] = []
    per_rep_completed: list[tuple[float | None, list[RequestEvent]]] = []
    occ = _OccupancyReadings()
    for rep in reps:
        rep_events = [e for e in events if e.repetition == rep]
        end = next((m for m in marks if m.repetition == rep and m.kind == "level_end"), None)
        res, steady = _repetition(rep, rep_events, end, n)
        rep_results.append(res)
        if steady is None:
            continue
        win, done = steady.window, steady.done
        windows.append(win)
        in_window += done
        in_window_itl_ms += steady.itl_ms
        failed_in_window += throughput.failed_in_window(rep_events, win)
        per_rep_completed.append((res.req_per_s, done))
        tw = occupancy.time_weighted_busy_slots(slots_s, win)
        if tw is not None:
            occ.sources.add("slots")
            occ.sparse.append(occupancy.coarse_sampling(f"r{rep}", "/slots",
                                                           occupancy.slots_sampling(slots_s, win), win))
        else:
            tw = occupancy.time_weighted_requests_processing(metrics_s, win)
            if tw is not None:
                occ.sources.add("requests_processing")
                occ.sparse.append(occupancy.coarse_sampling(
                    f"r{rep}", "requests_processing",
                    occupancy.requests_processing_sampling(metrics_s, win), win))
        occ.time_weighted.append(tw)
        dw, dw_why = occupancy.decode_weighted(metrics_s, win)
        occ.decode_weighted.append(dw)
        occ.decode_weighted_why.append(dw_why)
        occ.client_in_flight.append(occupancy.client_in_flight(rep_events, win))
        deferred = metrics_s.column("requests_deferred")[metrics_s.within(win.start_ns, win.end_ns)]
        occ.deferred += deferred[~np.isnan(deferred)].tolist()

    method = "t over repetitions"
    thr = Throughput(
        output_tok_per_s=mean_estimate(
            [r.output_tok_per_s for r in rep_results if r.output_tok_per_s is not None], method, floor=0.0),
        total_tok_per_s=mean_estimate(
            [r.total_tok_per_s for r in rep_results if r.total_tok_per_s is not None], method, floor=0.0),
        req_per_s=mean_estimate(
            [r.req_per_s for r in rep_results if r.req_per_s is not None], method, floor=0.0),
    )
    lat = Latency(
        ttft_ms=distribution([v for e in in_window if (v := latency.ttft_ms(e)) is not None]),
        itl_ms=distribution(in_window_itl_ms),
        tpot_ms=distribution([v for e in in_window if (v := latency.tpot_ms(e)) is not None]),
        e2e_ms=distribution([latency.e2e_ms(e) for e in in_window]),
        queue_time_ms=distribution(
            [v for e in in_window if (v := latency.queue_time_ms(e, ctx.overhead_ms)) is not None]
        ),
    )
    o = Occupancy(
        slots=ctx.slots,
        time_weighted_busy_slots=_window_mean(occ.time_weighted),
        time_weighted_source="+".join(sorted(occ.sources)) or None,
        decode_weighted_busy_slots=_window_mean(occ.decode_weighted),
        client_in_flight=_window_mean(occ.client_in_flight),
        requests_deferred_max=max(occ.deferred) if occ.deferred else None,
    )
    if ctx.slots:
        o.time_weighted_fraction = _ratio(o.time_weighted_busy_slots, ctx.slots)
        o.decode_weighted_fraction = _ratio(o.decode_weighted_busy_slots, ctx.slots)
        o.client_in_flight_fraction = _ratio(o.client_in_flight, ctx.slots)
    mem = _memory(_rep_intervals(events, marks), proc_s)
    spans = [(w.start_ns, w.end_ns) for w in windows] or _rep_intervals(events, marks)
    gpu = gpu_use(proc_s, spans, mem.peak_gpu_mem_bytes)
    little = littles_law(n, per_rep_completed)
    measured = [e for e in events if e.phase == "measured"]
    counts = Counts(
        requests_measured=len(measured),
        requests_ok=sum(1 for e in measured if e.ok),
        requests_in_window=len(in_window),
        warmup_requests=sum(1 for e in events if e.phase == "warmup"),
        retries=sum(e.retries for e in events),
        errors_by_type=dict(sorted(Counter(e.error.type for e in measured if e.error).items())),
    )
    result = LevelResult(
        concurrency=n, repetitions=rep_results, throughput=thr, latency=lat, occupancy=o,
        memory=mem, gpu=gpu, littles_law=little, counts=counts,
    )
    if ctx.slo is not None and (in_window or failed_in_window):
        met = slo_met(in_window, ctx.slo)
        result.slo_attainment = slo_attainment(met, len(in_window), len(failed_in_window))
        if thr.req_per_s.value is not None:
            result.goodput_req_per_s = goodput_req_per_s(thr.req_per_s.value, met, len(in_window))
    result.flags = level_flags(ctx, result, events)
    if (sparse := [x for x in occ.sparse if x]):
        result.flags.append(Flag.of(FlagKind.FEW_OCCUPANCY_SAMPLES, f"{'; '.join(sparse)}; the time-weighted "
                                    "busy slots is rough (read the decode-weighted figure)"))
    intervals = _rep_intervals(events, marks)
    result.unavailable = unavailable_figures(ctx, result, endpoint_failures(metrics_s, intervals),
                                             endpoint_failures(slots_s, intervals),
                                             next((w for w in occ.decode_weighted_why if w), None),
                                             nvml_failure(proc_s, intervals), cpu_failures(proc_s, intervals))
    return result


def repetition_intervals(events: Sequence[RequestEvent],
                         marks: Sequence[LevelMark]) -> dict[int, tuple[int, int]]:
    """repetition → [start, end] (ns) from its marks, else from its first send and last end."""
    out = {}
    for rep in sorted({e.repetition for e in events} | {m.repetition for m in marks}):
        starts = [m.t_ns for m in marks if m.repetition == rep and m.kind == "level_start"]
        ends = [m.t_ns for m in marks if m.repetition == rep and m.kind == "level_end"]
        rep_ev = [e for e in events if e.repetition == rep]
        lo = starts[0] if starts else min((e.sent_ns for e in rep_ev), default=None)
        hi = ends[0] if ends else max((e.end_ns for e in rep_ev), default=None)
        if lo is not None and hi is not None:
            out[rep] = (lo, hi)
    return out


def _rep_intervals(events: Sequence[RequestEvent], marks: Sequence[LevelMark]) -> list[tuple[int, int]]:
    """[start, end] of each repetition, in repetition order (`repetition_intervals`)."""
    return list(repetition_intervals(events, marks).values())


def _memory(intervals: list[tuple[int, int]], proc_s: SampleColumns) -> Memory:
    """Peaks over every repetition of the level; CPU cores averaged over repetitions."""
    rss = [v for lo, hi in intervals if (v := memory.peak_rss_bytes(proc_s, lo, hi)) is not None]
    gpu = [v for lo, hi in intervals if (v := memory.peak_gpu_mem_bytes(proc_s, lo, hi)) is not None]
    return Memory(
        peak_rss_bytes=max(rss) if rss else None,
        peak_gpu_mem_bytes=max(gpu) if gpu else None,
        server_cpu_cores=_mean_over(intervals, proc_s, memory.server_cpu_utilisation),
        host_busy_cores=_mean_over(intervals, proc_s, memory.host_busy_cores),
        client_cpu_cores=_mean_over(intervals, proc_s, memory.client_cpu_cores),
    )


def _mean_over(intervals: list[tuple[int, int]], proc_s: SampleColumns, fn) -> float | None:
    vals = [v for lo, hi in intervals if (v := fn(proc_s, lo, hi)) is not None]
    return sum(vals) / len(vals) if vals else None


CONTENDED_FRACTION = 0.9  # host busy ≥ 90 % of its logical cores
NEIGHBOUR_CORES = 0.25    # other processes using ≥ a quarter core
IDLE_HEADROOM_CORES = 1.0  # a whole core left idle: a small neighbour took nothing the node wanted
BUSY_NEIGHBOUR_CORES = 1.0  # a neighbour this big shares caches and memory bandwidth, idle cores or not


def neighbours_crowd(host_busy_cores: float, others_cores: float, host_cores: int) -> bool:
    """Whether other processes took CPU the server or the load generator could have used: they used
    ≥ NEIGHBOUR_CORES while less than IDLE_HEADROOM_CORES of the host stayed idle, or
    ≥ BUSY_NEIGHBOUR_CORES whatever stayed idle. A quarter core of neighbours on a 16-core host with
    14 idle cores (a GPU node) slows nothing."""
    return others_cores >= NEIGHBOUR_CORES and (host_cores - host_busy_cores < IDLE_HEADROOM_CORES
                                                or others_cores >= BUSY_NEIGHBOUR_CORES)


def cpu_contention_flag(m: Memory, host_cores: int | None, server_here: bool = True) -> Flag | None:
    """Flag a level whose numbers may be bent by CPU contention: the machine was (nearly) saturated,
    so server, load generator and any neighbour competed; or other processes took a real share.
    A server on another machine (`server_here` false) does not share this one: only satbench is slowed."""
    if m.host_busy_cores is None or not host_cores:
        return None
    others = m.host_busy_cores - (m.server_cpu_cores or 0.0) - (m.client_cpu_cores or 0.0)
    saturated = m.host_busy_cores >= CONTENDED_FRACTION * host_cores
    # without the server's own CPU (a running server, given by --url) it cannot be told from a neighbour
    if not saturated and (not neighbours_crowd(m.host_busy_cores, others, host_cores)
                          or m.server_cpu_cores is None):
        return None
    who = ("other processes" if m.server_cpu_cores is not None or not server_here
           else "other processes (the server among them)")
    parts = (f"host {m.host_busy_cores:.2f} of {host_cores} cores busy (server "
             f"{_cores(m.server_cpu_cores)}, satbench {_cores(m.client_cpu_cores)}, {who} "
             f"{max(others, 0):.2f})")
    why = ("other processes took CPU" if not saturated else "the load generator competes with the server "
                                                            "for CPU"
           if server_here else "the load generator itself may lag (the server runs on another machine)")
    return Flag.of(FlagKind.CPU_CONTENTION, f"{parts}; {why}")


def _cores(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}"


def _ratio(value: float | None, slots: int) -> float | None:
    return None if value is None else value / slots


def level_flags(ctx: LevelContext, r: LevelResult, events: Sequence[RequestEvent]) -> list[Flag]:
    """Stability and validity flags that travel with the level's numbers, family by family: the
    plan (queue-bound, few requests), the repetitions, the samples, the errors, the CPU, the tokens."""
    cpu = cpu_contention_flag(r.memory, ctx.host_cores, not ctx.server_remote)
    return (_plan_flags(ctx) + _repetition_flags(ctx, r.repetitions) + _sample_flags(ctx, r)
            + _error_flags(r.counts, events) + ([cpu] if cpu is not None else []) + _token_flags(ctx, events))


def _plan_flags(ctx: LevelContext) -> list[Flag]:
    """What the level was planned with: more streams than slots, too little context per slot, fewer
    measured requests than the design minimum."""
    out = []
    if ctx.slots is not None and ctx.level > ctx.slots:
        out.append(Flag.of(FlagKind.QUEUE_BOUND, f"{ctx.level} streams but {ctx.slots} slots"))
    if ctx.per_slot_ctx is not None and ctx.per_slot_ctx < ctx.prompt_tokens + ctx.output_tokens:
        out.append(Flag.of(FlagKind.QUEUE_BOUND, f"per-slot context {ctx.per_slot_ctx} < prompt+output "
                                                 f"{ctx.prompt_tokens + ctx.output_tokens}"))
    minimum = design_minimum_requests(ctx.level)
    if ctx.level_total_planned is not None:
        if ctx.level_total_planned < minimum:
            out.append(Flag.of(FlagKind.FEW_REQUESTS, f"{ctx.level_total_planned} measured over the level's "
                                                      f"repetitions (adaptive), design minimum {minimum}"))
    elif ctx.measured_requests_planned < minimum:
        out.append(Flag.of(FlagKind.FEW_REQUESTS, f"{ctx.measured_requests_planned} measured per repetition, "
                                                  f"design minimum {minimum}"))
    return out


def _repetition_flags(ctx: LevelContext, reps: list[RepetitionResult]) -> list[Flag]:
    """Repetitions missing, not complete, without a steady window, or with rates from fewer streams than N."""
    out = []
    if len(reps) < ctx.repetitions_planned:
        out.append(Flag.of(FlagKind.MISSING_REPETITIONS, f"{len(reps)} of {ctx.repetitions_planned}"))
    for rep in reps:
        if rep.status != "complete":
            out.append(Flag.repetition(rep.status, f"r{rep.repetition} {rep.status_reason or ''}".strip()))
        if rep.no_window_reason:
            out.append(Flag.of(FlagKind.NO_STEADY_WINDOW, f"r{rep.repetition} {rep.no_window_reason}"))
    thin = [f"r{rep.repetition} {rep.throughput_streams}" for rep in reps
            if rep.throughput_streams is not None and rep.throughput_streams < ctx.level]
    if thin:
        out.append(Flag.of(FlagKind.FEW_THROUGHPUT_STREAMS,
                           f"streams with a measured request running in the window ({', '.join(thin)} of "
                           f"{ctx.level}): the rates are scaled to N from those; raise --requests-per-level"))
    return out


def _sample_flags(ctx: LevelContext, r: LevelResult) -> list[Flag]:
    """A p95 from fewer than 100 requests; Little's law off by more than its tolerance."""
    out = []
    if r.latency.ttft_ms.few_samples or r.latency.e2e_ms.few_samples:
        out.append(Flag.of(FlagKind.FEW_SAMPLES,
                           f"p95 from {r.latency.e2e_ms.n} requests (< 100); read its CI"))
    if r.littles_law is not None and not r.littles_law.within_tolerance:
        out.append(Flag.of(FlagKind.LITTLES_LAW_MISMATCH,
                           f"N={ctx.level} but X·E2E={r.littles_law.n_from_little:.2f} "
                           f"({r.littles_law.relative_error:.1%} off)"))
    return out


def _error_flags(counts: Counts, events: Sequence[RequestEvent]) -> list[Flag]:
    """The server's errors by type, the requests satbench cancelled, the retries (with the first reason)."""
    out = []
    if (errors := counts.server_errors()):
        out.append(Flag.of(FlagKind.ERRORS, ", ".join(f"{k}×{v}" for k, v in errors.items())))
    if (cut := counts.errors_by_type.get(CANCELLED)):
        out.append(Flag.of(FlagKind.CANCELLED, f"{cut} request(s) in flight when satbench stopped the level "
                                               "(not server errors)"))
    if counts.retries:
        why = next((w for e in events for w in e.retry_reasons), None)
        out.append(Flag.of(FlagKind.RETRIES, f"{counts.retries} request(s) retried after a dropped connection"
                                             + (f" (first: {why})" if why else "")))
    return out


def _token_flags(ctx: LevelContext, events: Sequence[RequestEvent]) -> list[Flag]:
    """Token counts or timings the server did not give exactly."""
    out = []
    if any(not e.token_count_exact for e in events):
        out.append(Flag.of(FlagKind.TOKEN_COUNT_APPROXIMATE, "the server reported no exact token count"))
    if not ctx.llamacpp:
        out.append(Flag.of(FlagKind.TOKEN_TIMING_APPROXIMATE, "the usage total spread evenly over the SSE "
                                                              "chunks (the server says no count per chunk)"))
    return out
