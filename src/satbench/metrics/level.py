"""One level's result: every figure of metrics/specs.py with its sample count, CI and flags.

Pure function of the raw records (`summarize_level`); `analyze` calls it per lane and level. The
repetitions are read first (`_pool`), then each family of figures is computed from them in one
step (throughput, latency, occupancy, memory and GPU, prompt cache, SLO, counts), and the level is
built once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from satbench.config.schema import SloConfig
from satbench.metrics import cache, latency, memory, occupancy, throughput
from satbench.metrics.gpu import gpu_use
from satbench.metrics.level_flags import few_occupancy_flag, level_flags
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
from satbench.metrics.specs import family
from satbench.metrics.stats import distribution, mean_estimate, percentile_of
from satbench.metrics.unavailable import (
    cpu_failures,
    endpoint_failures,
    nvml_failure,
    unavailable_figures,
)
from satbench.metrics.window import SteadyWindow, steady_window
from satbench.records.events import (
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
    win, why = steady_window(events, n)
    steady = None
    if win is not None:
        done = throughput.completed_in_window(events, win)
        steady = _Window(win, done, [g for e in done for g in itl_ms(e)])
    res = RepetitionResult(
        repetition=rep,
        status=end_mark.status if end_mark else "incomplete",
        status_reason=end_mark.reason if end_mark else "no level_end mark (run stopped)",
        no_window_reason=why if win is None else None,
        requests_measured=len(measured),
        errors=sum(1 for e in measured if not e.ok),
        retries=sum(e.retries for e in events),
        cache_hit_ratio=cache.hit_ratio(events),
        **(_window_figures(events, steady, n) if steady is not None else {}),
    )
    return res, steady


def _window_figures(events: list[RequestEvent], steady: _Window, n: int) -> dict[str, Any]:
    """A repetition's figures over its steady window: its span, rates and own p95s."""
    win, done = steady.window, steady.done
    return {
        "window_start_ns": win.start_ns, "window_end_ns": win.end_ns, "window_s": win.duration_s,
        "output_tokens_in_window": throughput.output_tokens_in_window(events, win),
        "throughput_streams": throughput.throughput_streams(events, win),
        "output_tok_per_s": throughput.output_tok_per_s(events, win, n),
        "total_tok_per_s": throughput.total_tok_per_s(events, win, n),
        "req_per_s": throughput.req_per_s(events, win, n),
        "requests_completed_in_window": len(done),
        "p95_ttft_ms": percentile_of([v for e in done if (v := latency.ttft_ms(e)) is not None], 95),
        "p95_itl_ms": percentile_of(steady.itl_ms, 95),
        "p95_e2e_ms": percentile_of([latency.e2e_ms(e) for e in done], 95),
    }


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

    def read(self, rep: int, rep_events: list[RequestEvent], win: SteadyWindow, lane: LaneSamples) -> None:
        """Add one repetition's window: busy slots from /slots, else from requests_processing."""
        metrics_s, slots_s = lane.metrics, lane.slots
        tw = occupancy.time_weighted_busy_slots(slots_s, win)
        if tw is not None:
            self.sources.add("slots")
            self.sparse.append(occupancy.coarse_sampling(f"r{rep}", "/slots",
                                                         occupancy.slots_sampling(slots_s, win), win))
        elif (tw := occupancy.time_weighted_requests_processing(metrics_s, win)) is not None:
            self.sources.add("requests_processing")
            sampling = occupancy.requests_processing_sampling(metrics_s, win)
            self.sparse.append(occupancy.coarse_sampling(f"r{rep}", "requests_processing", sampling, win))
        self.time_weighted.append(tw)
        dw, dw_why = occupancy.decode_weighted(metrics_s, win)
        self.decode_weighted.append(dw)
        self.decode_weighted_why.append(dw_why)
        self.client_in_flight.append(occupancy.client_in_flight(rep_events, win))
        deferred = metrics_s.column("requests_deferred")[metrics_s.within(win.start_ns, win.end_ns)]
        self.deferred += deferred[~np.isnan(deferred)].tolist()


@dataclass
class _Pooled:
    """What a level's repetitions give together: each one's result, their steady windows, the
    successful requests that ended in those (`done`, with their inter-token gaps, ms), the failed ones
    that ended in them, each window's req/s with its completions (Little's law), the occupancy readings."""

    repetitions: list[RepetitionResult] = field(default_factory=list)
    windows: list[SteadyWindow] = field(default_factory=list)
    done: list[RequestEvent] = field(default_factory=list)
    itl_ms: list[float] = field(default_factory=list)
    failed: list[RequestEvent] = field(default_factory=list)
    completed: list[tuple[float | None, list[RequestEvent]]] = field(default_factory=list)
    occupancy: _OccupancyReadings = field(default_factory=_OccupancyReadings)
    batch_rates: dict[int, list[float]] = field(default_factory=dict)  # repetition → its window's batches


def _pool(n: int, events: Sequence[RequestEvent], marks: Sequence[LevelMark], lane: LaneSamples) -> _Pooled:
    """Every repetition of the level, in order, read over its steady window."""
    p = _Pooled()
    for rep in sorted({e.repetition for e in events} | {m.repetition for m in marks}):
        rep_events = [e for e in events if e.repetition == rep]
        end = next((m for m in marks if m.repetition == rep and m.kind == "level_end"), None)
        res, steady = _repetition(rep, rep_events, end, n)
        p.repetitions.append(res)
        if steady is None:
            continue
        p.windows.append(steady.window)
        p.done += steady.done
        p.itl_ms += steady.itl_ms
        p.failed += throughput.failed_in_window(rep_events, steady.window)
        p.completed.append((res.req_per_s, steady.done))
        p.batch_rates[rep] = throughput.batch_rates(rep_events, steady.window)
        p.occupancy.read(rep, rep_events, steady.window, lane)
    return p


def _window_mean(values: list[float | None]) -> float | None:
    good = [v for v in values if v is not None]
    return sum(good) / len(good) if good else None


def _throughput(p: _Pooled, one_repetition_ci: bool) -> Throughput:
    """Each throughput figure (metrics/specs.py): the mean over the repetitions that have one, with a
    Student-t CI floored at 0; with `one_repetition_ci`, output tok/s measured in one repetition gets
    the CI of its batch means (throughput.one_repetition_half_width)."""
    figures = {s.name: mean_estimate([v for r in p.repetitions if (v := getattr(r, s.name)) is not None],
                                     "t over repetitions", floor=0.0)
               for s in family("throughput")}
    out = figures["output_tok_per_s"]
    once = [r for r in p.repetitions if r.output_tok_per_s is not None]
    if one_repetition_ci and out.value is not None and len(once) == 1:
        half = throughput.one_repetition_half_width(out.value, p.batch_rates.get(once[0].repetition, []))
        if half is not None:
            figures["output_tok_per_s"] = out.model_copy(update={
                "ci_low": max(0.0, out.value - half), "ci_high": out.value + half,
                "ci_method": f"batch means of one repetition ({throughput.BATCHES} spans), at least "
                             f"±{throughput.ONE_REPETITION_CI_FLOOR:.0%}"})
    return Throughput(**figures)


def _cache(events: Sequence[RequestEvent], reps: list[RepetitionResult]) -> cache.CacheFigures | None:
    """The prompt-cache figures: the hit ratio as the throughput figures combine (mean over the
    repetitions that have one, Student-t CI floored at 0), the rest pooled over the repetitions."""
    hit = mean_estimate([v for r in reps if (v := r.cache_hit_ratio) is not None], "t over repetitions",
                        floor=0.0)
    return cache.cache_figures(events, hit)


def _latency(p: _Pooled, overhead_ms: float) -> Latency:
    """Each latency figure (metrics/specs.py): the distribution of its per-request values, pooled
    over the windows' successful requests (ITL: over their inter-token gaps)."""
    per_request: dict[str, Callable[[RequestEvent], float | None]] = {
        "ttft_ms": latency.ttft_ms, "tpot_ms": latency.tpot_ms, "e2e_ms": latency.e2e_ms,
        "queue_time_ms": lambda e: latency.queue_time_ms(e, overhead_ms)}
    samples = {name: [v for e in p.done if (v := fn(e)) is not None] for name, fn in per_request.items()}
    samples["itl_ms"] = p.itl_ms
    return Latency(**{s.name: distribution(samples[s.name]) for s in family("latency")})


def _occupancy(slots: int | None, occ: _OccupancyReadings) -> Occupancy:
    """Busy slots (time- and decode-weighted), the client's requests in flight, each a mean over the
    windows and a fraction of the slots; the most requests deferred."""
    tw, dw, cf = (_window_mean(occ.time_weighted), _window_mean(occ.decode_weighted),
                  _window_mean(occ.client_in_flight))
    return Occupancy(
        slots=slots, time_weighted_busy_slots=tw, time_weighted_source="+".join(sorted(occ.sources)) or None,
        decode_weighted_busy_slots=dw, client_in_flight=cf,
        time_weighted_fraction=_ratio(tw, slots), decode_weighted_fraction=_ratio(dw, slots),
        client_in_flight_fraction=_ratio(cf, slots),
        requests_deferred_max=max(occ.deferred) if occ.deferred else None,
    )


def _ratio(value: float | None, slots: int | None) -> float | None:
    return None if value is None or not slots else value / slots


def _slo(slo: SloConfig | None, p: _Pooled, req_per_s: float | None) -> tuple[float | None, float | None]:
    """(SLO attainment, goodput req/s) over the windows' requests (failed ones ending in them miss
    it); None without an SLO or a request."""
    if slo is None or not (p.done or p.failed):
        return None, None
    met = slo_met(p.done, slo)
    goodput = None if req_per_s is None else goodput_req_per_s(req_per_s, met, len(p.done))
    return slo_attainment(met, len(p.done), len(p.failed)), goodput


def _counts(events: Sequence[RequestEvent], in_window: int) -> Counts:
    measured = [e for e in events if e.phase == "measured"]
    return Counts(
        requests_measured=len(measured),
        requests_ok=sum(1 for e in measured if e.ok),
        requests_in_window=in_window,
        warmup_requests=sum(1 for e in events if e.phase == "warmup"),
        retries=sum(e.retries for e in events),
        errors_by_type=dict(sorted(Counter(e.error.type for e in measured if e.error).items())),
    )


def summarize_level(
    ctx: LevelContext,
    events: Sequence[RequestEvent],
    marks: Sequence[LevelMark],
    samples: LaneSamples | Sequence[MetricsSample | SlotsSample | ProcessSample],
) -> LevelResult:
    """All figures of one level, pooled over its repetitions (throughput CI across repetitions),
    family by family; its flags and unavailable figures from those. `samples`: the lane's in the
    level's scenario (the level's are found by time)."""
    lane = lane_samples(samples)
    p = _pool(ctx.level, events, marks, lane)
    intervals = _rep_intervals(events, marks)
    thr = _throughput(p, ctx.one_repetition_ci)
    mem = _memory(intervals, lane.process)
    spans = [(w.start_ns, w.end_ns) for w in p.windows] or intervals
    attainment, goodput = _slo(ctx.slo, p, thr.req_per_s.value)
    figures = LevelResult(
        concurrency=ctx.level, repetitions=p.repetitions, throughput=thr,
        latency=_latency(p, ctx.overhead_ms), occupancy=_occupancy(ctx.slots, p.occupancy), memory=mem,
        gpu=gpu_use(lane.process, spans, mem.peak_gpu_mem_bytes), cache=_cache(events, p.repetitions),
        littles_law=littles_law(ctx.level, p.completed), slo_attainment=attainment, goodput_req_per_s=goodput,
        counts=_counts(events, len(p.done)),
    )
    occ = p.occupancy
    unavailable = unavailable_figures(
        ctx, figures, endpoint_failures(lane.metrics, intervals), endpoint_failures(lane.slots, intervals),
        next((w for w in occ.decode_weighted_why if w), None), nvml_failure(lane.process, intervals),
        cpu_failures(lane.process, intervals))
    flags = level_flags(ctx, figures, events) + few_occupancy_flag(occ.sparse)
    return figures.model_copy(update={"flags": flags, "unavailable": unavailable})


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
