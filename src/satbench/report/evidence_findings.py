"""EVIDENCE.md's findings: each lane's section (levels, GPU, interference, fairness verdicts, plots),
the recommendations, the levels' flags and the run's limitations (report/evidence assembles them).

Each builder takes the derived files (`ResultsFile`, `RecommendationsFile` or one `LaneResult`)
and returns its section's blocks; a section whose data does not exist gives none.
"""

from __future__ import annotations

from collections.abc import Sequence

from satbench.analysis.results import LaneResult, ResultsFile
from satbench.gguf.architectures import described_architecture
from satbench.metrics.flags import FlagKind, has_flag
from satbench.metrics.specs import CACHE_CELL, table_columns
from satbench.metrics.throughput import ONE_REPETITION_CI_FLOOR
from satbench.report.document import Block, Bullets, Heading, Image, Para, TableBlock
from satbench.report.evidence_setup import afar, mib, server_where
from satbench.report.plot_file import PlotFile
from satbench.report.rates import rate_blocks, rate_line
from satbench.report.table import (
    INTERFERENCE_HEADERS,
    LEVEL_LEGEND,
    RECOMMENDATION_HEADERS,
    VERDICT_HEADERS,
    VERDICT_LEGEND,
    doubts,
    interference_row,
    lane_title,
    level_ci_notes,
    level_row,
    recommendation_row,
    verdict_row,
)
from satbench.saturation.recommendations_file import RecommendationsFile
from satbench.saturation.slo import fewest_to_bound_p95


def gpu_table(lane: LaneResult) -> list[Block]:
    rows = [[str(lv.concurrency), str(lv.gpu.samples),
             "n/a" if lv.gpu.util_mean_pct is None else f"{lv.gpu.util_mean_pct:.0f} / "
                                                        f"{lv.gpu.util_max_pct:.0f}",
             "n/a" if lv.gpu.sm_clock_mean_mhz is None else f"{lv.gpu.sm_clock_mean_mhz:.0f}",
             f"{mib(lv.gpu.mem_used_mean_bytes)} / {mib(lv.gpu.mem_used_peak_bytes)}",
             "n/a" if lv.memory.server_cpu_cores is None else f"{lv.memory.server_cpu_cores:.2f}"]
            for lv in lane.levels if lv.gpu is not None]
    if not rows:
        return []
    return [TableBlock(headers=["N", "NVML readings", "GPU util mean / max %", "SM clock MHz",
                                "GPU memory mean / peak", "server CPU cores"], rows=rows,
                       caption=f"{lane.lane}: GPU (NVML, device-wide) and server CPU, steady windows")]


def _plots_for(plots: Sequence[PlotFile], lane: str) -> list[Block]:
    return [Image(file=p.file, title=p.title, caption=p.caption) for p in plots if p.lane == lane]


CACHE_LEGEND = (f"; {CACHE_CELL.header} = share of prompt tokens the prompt cache supplied / share of a "
                "conversation's returning turns that found their history in it (docs/workloads.md)")


def lane_section(lane: LaneResult, plots: Sequence[PlotFile]) -> list[Block]:
    blocks: list[Block] = [Heading(level=2, text=f"Lane {lane.lane}"), Para(text=lane_title(lane))]
    if lane.slo is not None:
        blocks.append(Para(text=f"SLO: {lane.slo.model_dump_json()}"))
    cached = False  # a table shows the prompt cache's column
    for label, levels in (("alone on the machine", lane.levels), ("together with the run's other lanes",
                                                                   lane.together_levels)):
        if levels:
            columns = table_columns(levels)
            cached = cached or any(h == CACHE_CELL.header for h, _ in columns)
            blocks.append(TableBlock(headers=[h for h, _ in columns], caption=f"{lane.lane}, {label}",
                                     rows=[level_row(lv, columns) for lv in levels]))
    if lane.levels or lane.together_levels:
        notes = [n for tag, levels in (("", lane.levels), ("together ", lane.together_levels))
                 for lv in levels for n in level_ci_notes(lv, f"{tag}N={lv.concurrency} ")]
        blocks.append(Para(text=LEVEL_LEGEND + (CACHE_LEGEND if cached else "") + "."))
        if notes:
            blocks.append(Bullets(items=notes))
    blocks += gpu_table(lane)
    blocks += rate_blocks(lane)
    if lane.interference:
        blocks.append(TableBlock(headers=list(INTERFERENCE_HEADERS),
                                 rows=[interference_row(r) for r in lane.interference],
                                 caption=f"{lane.lane}: together ÷ alone, with 95% CI (conservative "
                                         "interval arithmetic)"))
    if lane.fairness:
        blocks.append(Heading(level=3, text=f"Fairness and starvation ({lane.lane})"))
        blocks.append(TableBlock(headers=list(VERDICT_HEADERS), rows=[verdict_row(v) for v in lane.fairness],
                                 caption=VERDICT_LEGEND))
    blocks += _plots_for(plots, lane.lane)
    return blocks


def recommendations(recs: RecommendationsFile | None) -> list[Block]:
    if recs is None:
        return []
    blocks: list[Block] = [Heading(level=2, text="Recommendations"),
                           TableBlock(headers=list(RECOMMENDATION_HEADERS),
                                      rows=[recommendation_row(r) for r in recs.lanes],
                                      caption="recommended = the largest measured level ≤ min(knee, SLO "
                                              "bound, slots, fairness cap, below a level whose server "
                                              "failed or "
                                              "where more than 1% of requests failed), none safe when no "
                                              "measured "
                                              "level is that low; out tok/s and p95 TTFT / TPOT with their "
                                              "95% CIs")]
    items = []
    for r in recs.lanes:
        items += [f"{r.lane}: {r.binding.detail}", f"{r.lane}: knee — {r.knee_reason}",
                  f"{r.lane}: server side {r.server_confirmation.statement}",
                  *([f"{r.lane}: what saturated ({r.saturation.resource}) — {r.saturation.statement}"]
                    if r.saturation is not None else []),
                  f"{r.lane}: USL — " + (f"peak N* ≈ {r.usl.peak_n:.1f}"
                                         if r.usl.peak_reported and r.usl.peak_n
                                         else r.usl.why_not or "no peak reported")]
        items += [f"{r.lane}: {line}" for line in doubts(r)]
        if (rate := rate_line(r)) is not None:
            items.append(f"{r.lane}: {rate}")
    blocks.append(Bullets(items=items))
    return blocks


def plan_section(results: ResultsFile) -> list[Block]:
    """How each adaptive lane chose its levels: every decision with its reason, and the shortcuts the
    adaptive sweep takes against a fixed one."""
    blocks: list[Block] = []
    for lane in results.lanes:
        if not lane.plan:
            continue
        a = results.config.lane(lane.lane).adaptive
        blocks += [Heading(level=3, text=f"Lane {lane.lane}: the adaptive sweep's decisions"),
                   TableBlock(headers=["t (s)", "action", "N", "repetition", "why"],
                              rows=[[f"{d.elapsed_s:.1f}", d.action, str(d.level or ""),
                                     str(d.repetition or ""), d.reason] for d in lane.plan])]
        if a is not None:
            warm = ("one warmup per stream before the first level the server runs (later levels start warm; "
                    "their first requests fall before the steady window)" if a.warmup == "first_level"
                    else "one warmup per stream before its first")
            blocks.append(Bullets(items=[
                f"shortcut: a repetition is N × {a.requests_per_stream} measured requests (a fixed sweep's "
                f"is max(8N, 32)); a level's repetitions are interleaved with its neighbours', {warm}; "
                "p95s rest on fewer requests (their CIs say how few)",
                f"shortcut: a level stops at {a.min_repetitions} to {a.max_repetitions} repetitions, once "
                f"the throughput CI is within ±{a.ci_target:.0%} or no value within it would change the "
                "knee's answer; levels are doubled from 1, not all run",
                *_one_repetition(lane, a.one_repetition_ci == "batch_means"),
                "levels the sweep did not measure are not evidence: their figures are absent, not inferred",
            ] + ([f"shortcut: with the SLO, only the level the answer rests on is measured until its p95s "
                  f"can be bounded ({fewest_to_bound_p95()} requests in the window); a lower level is not, "
                  "and counts against the SLO only when seen to miss it (its p95s are taken not to exceed "
                  "a higher level's)"] if lane.slo is not None else [])))
    if blocks:
        blocks.insert(0, Heading(level=2, text="How the levels were chosen"))
    return blocks


def _one_repetition(lane: LaneResult, batch_means: bool) -> list[str]:
    """The shortcuts of levels measured once: the confirm past the slots, and (with batch means) the
    levels that stood on one repetition."""
    confirms = [d for d in lane.plan if d.action == "confirm" and d.requests]
    out = [f"shortcut: N={d.level}, past the slots, ran {d.requests} requests: it shows the server's queue, "
           "and the slots bind the answer below it" for d in confirms]
    once = [lv.concurrency for lv in lane.levels if len(lv.repetitions) == 1
            and lv.concurrency not in {d.level for d in confirms}
            and lv.throughput.output_tok_per_s.ci_method.startswith("batch means")]
    if batch_means:
        out.append("shortcut: a level measured once has a throughput CI from the batch means of its steady "
                   f"window, at least ±{ONE_REPETITION_CI_FLOOR:.0%}, and gets no second repetition where "
                   "that CI already decides its steps to its neighbours" +
                   (f": {', '.join(f'N={n}' for n in once)} stood on one" if once else ""))
    return out


def flags(results: ResultsFile) -> list[Block]:
    items = [f"{lane.lane} {scenario} N={lv.concurrency}: {f}"
             for lane in results.lanes
             for scenario, levels in (("alone", lane.levels), ("together", lane.together_levels))
             for lv in levels for f in lv.flags]
    text = Bullets(items=items) if items else Para(text="No level raised a flag.")
    return [Heading(level=2, text="Flags raised"),
            Para(text="Every level's validity flags (few samples, Little's-law mismatch, retries, errors, "
                      "CPU contention, queue-bound levels, missing repetitions):"), text]


def lane_caveats(lane: LaneResult) -> list[str]:
    """What about the lane itself makes every figure of it doubtful: SYNTHETIC weights, a server that
    is not llama.cpp, a server on another machine (the Limitations and the Answer both list them)."""
    items = []
    if lane.model.synthetic:
        arch = f" ({described_architecture(lane.model.architecture)})" if lane.model.architecture else ""
        items.append(f"SYNTHETIC random weights — the timings are those of the architecture{arch} "
                     "and shapes, the text is meaningless; do not read quality into it.")
    if not lane.runtime.llamacpp:
        items.append("not a llama.cpp server — slots, queue estimate and token timing are "
                     "unavailable or approximate.")
    if afar(lane):
        items.append("a server on another machine (given by --url, remote network path) — "
                     "its memory, CPU and GPU were not sampled. Its figures hold for the server's hardware, "
                     "which satbench did not see: the Machine section and the hardware fingerprint describe "
                     "the measuring machine (this client), not the server, so the capability report refuses "
                     "to advertise them; measure on the node itself to advertise the lane.")
    return items


def limitations(results: ResultsFile, recs: RecommendationsFile | None) -> list[Block]:
    items = []
    for lane in results.lanes:
        items += [f"{lane.lane}: {caveat}" for caveat in lane_caveats(lane)]
        if not lane.runtime.starts_server and not afar(lane):  # on another machine: lane_caveats says it
            items.append(f"{lane.lane}: a running server {server_where(lane)}, given by --url — satbench did "
                         "not start it, so its process memory and CPU were not sampled"
                         + ("; GPU figures are NVML's device-wide readings of this machine."
                            if lane.hardware.gpus else "."))
    build = "llama.cpp" if all(lane.runtime.llamacpp for lane in results.lanes) else "server"
    remote = [lane.lane for lane in results.lanes if afar(lane)]
    local = [lane.lane for lane in results.lanes if lane.lane not in remote]
    networked = [lane for lane in results.lanes if lane.network.path == "remote"]
    rtt = ("loopback RTT" if not networked else "client↔server network RTT, whose jitter enters the estimate"
           if len(networked) == len(results.lanes) else "client↔server RTT: loopback, or the network's")
    items += [
        f"Queue time is an estimate on llama.cpp (TTFT − server prompt_ms − {rtt}): the server stamps no "
        "queue time.",
        "Percentile CIs are distribution-free order-statistic intervals; throughput CIs are Student-t over "
        "repetitions, which assumes the repetitions are independent.",
    ]
    if local:
        items.append(f"Every figure{'' if not remote else ' of ' + ', '.join(local)} holds for this hardware "
                     f"fingerprint, this {build} build, this model file and this workload shape "
                     "(prompt/output tokens); the capability report refuses to apply it elsewhere.")
    if remote:
        items.append(f"{', '.join(remote)}: the figures hold for the remote server's hardware, this {build} "
                     "build, this model and this workload shape; as that hardware was not seen, the "
                     "capability "
                     "report refuses to advertise them anywhere.")
    if any(has_flag(lv.flags, FlagKind.CPU_CONTENTION) for lane in results.lanes for lv in lane.levels):
        items.append("Some levels ran with the CPU saturated: the load generator shares the machine with the "
                     "server, so those levels measure the pair, not the server alone.")
    if results.status != "complete":
        items.append(f"The run is {results.status}: {results.status_reason or 'no reason recorded'}; "
                     "levels it did not reach are absent, not zero.")
    return [Heading(level=2, text="Limitations"), Bullets(items=items)]
