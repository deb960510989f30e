"""A level's validity flags (metrics/flags.py), family by family: what the level was planned with,
its repetitions, its samples, its errors, the CPU it shared, its tokens (`level_flags`); and the rule
for CPU contention that metrics/contention.py shares (`neighbours_crowd`)."""

from __future__ import annotations

from collections.abc import Sequence

from satbench.config.schema import design_minimum_requests
from satbench.metrics.flags import Flag, FlagKind
from satbench.metrics.level_result import Counts, LevelContext, LevelResult, Memory, RepetitionResult
from satbench.records.events import CANCELLED, RequestEvent

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


def few_occupancy_flag(sparse: list[str | None]) -> list[Flag]:
    """The windows whose time-weighted busy slots rest on coarse sampling (occupancy.coarse_sampling)."""
    notes = [x for x in sparse if x]
    if not notes:
        return []
    return [Flag.of(FlagKind.FEW_OCCUPANCY_SAMPLES, f"{'; '.join(notes)}; the time-weighted busy slots is "
                                                    "rough (read the decode-weighted figure)")]
