"""The contention guard (docs/definitions.md#contended-repetition): which repetitions of a level ran
while other processes took CPU, and the level summarized from the others.

Per repetition, from the process samples over its interval (level_start to level_end):
others = host busy cores − server cores − satbench's cores. A repetition is contended when

- the server is on this machine and its own CPU is known: others ≥ NEIGHBOUR_CORES (0.25 core)
  while less than IDLE_HEADROOM_CORES (1 core) of the host stayed idle, or others ≥
  BUSY_NEIGHBOUR_CORES (1 core) (`neighbours_crowd`), or the host is ≥ CONTENDED_FRACTION (90 %)
  busy and others ≥ SATURATED_OTHERS_CORES (0.1 core);
- the server is on another machine: the host is ≥ 90 % busy (the load generator itself may lag).

A server and load generator that fill the machine by themselves are not contention: that is the
node as it serves. Without the server's CPU (a process satbench could not find) others cannot be
told apart, and nothing is called contended.

`summarize_guarded` leaves the contended repetitions out of the level's figures while at least
two clean ones remain (they are listed in `excluded_repetitions`); with fewer, every repetition
counts and the level is `contended`: it is kept, but the knee rule does not use it.
"""

from __future__ import annotations

from collections.abc import Sequence

from satbench.metrics import memory
from satbench.metrics.flags import Flag, FlagKind
from satbench.metrics.level import repetition_intervals, summarize_level
from satbench.metrics.level_flags import CONTENDED_FRACTION, neighbours_crowd
from satbench.metrics.level_result import LevelContext, LevelResult
from satbench.records.events import LevelMark, MetricsSample, ProcessSample, RequestEvent, SlotsSample
from satbench.records.samples import LaneSamples, ProcessColumns, lane_samples

SATURATED_OTHERS_CORES = 0.1  # on a ≥ 90 % busy host, other processes' share that counts
MIN_CLEAN_REPETITIONS = 2     # clean repetitions a level needs for the contended ones to be left out


def contention(proc_s: ProcessColumns, start_ns: int, end_ns: int, host_cores: int | None,
               server_here: bool) -> str | None:
    """Why the interval [start_ns, end_ns] was contended (see the module), or None when it was not
    (or cannot be told)."""
    host = memory.host_busy_cores(proc_s, start_ns, end_ns)
    if host is None or not host_cores:
        return None
    saturated = host >= CONTENDED_FRACTION * host_cores
    if not server_here:
        return (f"host {host:.2f} of {host_cores} cores busy while the server runs elsewhere: the load "
                "generator may lag") if saturated else None
    server = memory.server_cpu_utilisation(proc_s, start_ns, end_ns)
    if server is None:
        return None
    client = memory.client_cpu_cores(proc_s, start_ns, end_ns) or 0.0
    others = host - server - client
    if neighbours_crowd(host, others, host_cores) or (saturated and others >= SATURATED_OTHERS_CORES):
        return (f"other processes used {others:.2f} cores (host {host:.2f} of {host_cores} busy, server "
                f"{server:.2f}, satbench {client:.2f})")
    return None


def summarize_guarded(ctx: LevelContext, events: Sequence[RequestEvent], marks: Sequence[LevelMark],
                      samples: LaneSamples | Sequence[MetricsSample | SlotsSample | ProcessSample]
                      ) -> LevelResult:
    """`summarize_level` of the level's clean repetitions when at least MIN_CLEAN_REPETITIONS are
    clean and some are contended (those are left out and named); else of all of them, the level
    marked `contended` when any repetition was."""
    samples = lane_samples(samples)
    proc_s = samples.process
    why = {rep: w for rep, (lo, hi) in repetition_intervals(events, marks).items()
           if (w := contention(proc_s, lo, hi, ctx.host_cores, not ctx.server_remote)) is not None}
    reps = {e.repetition for e in events} | {m.repetition for m in marks}
    clean = reps - set(why)
    if not why or len(clean) < MIN_CLEAN_REPETITIONS:
        result = summarize_level(ctx, events, marks, samples)
        if not why:
            return result
        contended = "; ".join(f"r{rep}: {w}" for rep, w in sorted(why.items()))
        flag = Flag.of(FlagKind.CONTENDED, f"{contended}; this level neither makes nor moves the knee")
        return result.model_copy(update={"contended": contended, "flags": [*result.flags, flag]})
    planned = max(ctx.repetitions_planned - len(why), 0)
    result = summarize_level(ctx.model_copy(update={"repetitions_planned": planned}),
                             [e for e in events if e.repetition in clean],
                             [m for m in marks if m.repetition in clean], samples)
    flag = Flag.of(FlagKind.CONTENDED_REPETITIONS_EXCLUDED,
                   "; ".join(f"r{rep} ({w})" for rep, w in sorted(why.items())))
    return result.model_copy(update={"excluded_repetitions": dict(sorted(why.items())),
                                     "flags": [*result.flags, flag]})
