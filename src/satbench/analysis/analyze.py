"""Raw files → results.json. The sweep calls this too, so `satbench analyze` reproduces it byte for byte."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from satbench.analysis.checks import lane_verdicts
from satbench.analysis.results import LaneResult, ResultsFile, verdicts_of, write_results, write_verdicts
from satbench.analysis.verdicts import Verdict
from satbench.config.schema import LaneConfig, together_shape
from satbench.errors import RunDirError
from satbench.metrics.contention import summarize_guarded
from satbench.metrics.interference import interference
from satbench.metrics.level_result import LevelContext, LevelResult
from satbench.metrics.open_loop import RateResult, rate_result
from satbench.metrics.slot_memory import lane_memory
from satbench.records.events import (
    EVENTS_FILE,
    SAMPLES_FILE,
    LevelMark,
    RequestEvent,
    check_not_cut,
    current_session_records,
    read_events,
)
from satbench.records.manifest import LaneProvenance, PlanDecision, RunManifest, ServerFailure, read_manifest
from satbench.records.samples import SampleSet, read_sample_set, sample_set
from satbench.workload.fairness_plan import fairness_plan


def _levels(lane: LaneConfig, prov: LaneProvenance, scenario: str, records: list, samples: SampleSet,
            host_cores: int | None = None, shape: tuple[int, int] | None = None,
            plan: list[PlanDecision] | None = None) -> list[LevelResult]:
    """Every level of one lane in one scenario; with `shape` (steps, repetitions), only the lane's first
    `steps` levels and repetitions up to `repetitions` (the together scenario: what every lane had).
    An adaptive lane's level planned as many repetitions as its `plan` decided to measure."""
    steps, reps = shape or (len(lane.levels), lane.repetitions)
    decided = Counter(d.level for d in plan or [] if d.level is not None)
    totals: Counter[int] = Counter()
    for d in plan or []:
        if d.level is not None:
            totals[d.level] += d.requests or lane.measured_requests(d.level)
    kept = set(lane.levels[:steps]) if shape else None

    def mine(r) -> bool:
        return (r.lane == lane.name and r.scenario == scenario
                and (kept is None or (r.level in kept and r.repetition <= reps)))
    events = [r for r in records if isinstance(r, RequestEvent) and mine(r)]
    marks = [r for r in records if isinstance(r, LevelMark) and mine(r)]
    lane_samples = samples.lane(lane.name, scenario)
    out = []
    for n in sorted({e.level for e in events} | {m.level for m in marks}):
        ctx = LevelContext(
            lane=lane.name, level=n, repetitions_planned=decided.get(n, reps) if plan else reps,
            measured_requests_planned=lane.measured_requests(n),
            slots=prov.runtime.total_slots, per_slot_ctx=prov.runtime.per_slot_ctx,
            prompt_tokens=lane.workload.prompt_bounds()[1], output_tokens=lane.workload.output_bounds()[1],
            overhead_ms=prov.network.rtt_ms_median or 0.0, llamacpp=prov.runtime.llamacpp, slo=lane.slo,
            host_cores=host_cores, server_remote=not prov.network.on_this_machine,
            level_total_planned=totals.get(n) if plan else None,
            one_repetition_ci=lane.adaptive is not None and lane.adaptive.one_repetition_ci == "batch_means",
        )
        out.append(summarize_guarded(ctx, [e for e in events if e.level == n],
                                   [m for m in marks if m.level == n], lane_samples))
    return out


def _rates(lane: LaneConfig, prov: LaneProvenance, records: list) -> list[RateResult]:
    """Every open-loop rate of the lane that left a record (scenario "open", level = its position)."""
    if (rates := lane.open_loop) is None:
        return []
    cap = rates.cap(prov.runtime.total_slots or 1)
    mine = [r for r in records if r.lane == lane.name and r.scenario == "open"]
    out = []
    for k, rate in enumerate(rates.rates, start=1):
        events = [r for r in mine if isinstance(r, RequestEvent) and r.level == k and r.phase == "measured"]
        marks = [r for r in mine if isinstance(r, LevelMark) and r.level == k]
        if events or marks:
            out.append(rate_result(rate, k, cap, events, marks, lane.slo))
    return out


def _mark_failed(records: list, failures: list[ServerFailure]) -> list:
    """A level that lost its server is failed even where the load generator's own mark said
    complete (the server died after the last answer): run.json's server_failures say so."""
    failed = {(f.lane, f.scenario, f.level, f.repetition, f.session): f.reason for f in failures}
    out = []
    for r in records:
        key = (r.lane, r.scenario, r.level, r.repetition, r.session) if isinstance(r, LevelMark) else None
        if key in failed and r.kind == "level_end" and r.status == "complete":
            r = r.model_copy(update={"status": "failed", "reason": failed[key]})
        out.append(r)
    return out


def _fairness(lane: LaneConfig, prov: LaneProvenance, records: list,
              failures: list[ServerFailure]) -> list[Verdict]:
    """The six verdicts, when the fairness checks ran for this lane; the checks a lost server
    kept from running say so (the failure of the session whose events are judged)."""
    rt = prov.fairness_runtime
    if rt is None:
        return []
    events = [r for r in records
              if isinstance(r, RequestEvent) and r.lane == lane.name and r.scenario == "fairness"]
    mine = [f for f in failures if f.lane == lane.name and f.scenario == "fairness"]
    sessions = {e.session for e in events} or {max((f.session for f in mine), default=0)}
    lost = next((f.reason for f in mine if f.session in sessions), None)
    return lane_verdicts(events, fairness_plan(lane, rt, prov.fairness_network or prov.network),
                         lane.fairness, rt.llamacpp, lost=lost)


def analyze_run(run_dir: Path) -> ResultsFile:
    """Recompute every figure of a run from run.json, events.jsonl and server_samples.jsonl."""
    manifest = read_manifest(run_dir)
    if manifest.provenance is None or not manifest.provenance.lanes:
        raise RunDirError(f"{run_dir}: the run stopped before any server was described; nothing to analyze")
    if manifest.status == "complete":  # a torn last line is a crash's only while the run is unfinished
        for name in (EVENTS_FILE, SAMPLES_FILE):
            check_not_cut(run_dir / name)
    return analyze_records(manifest, read_events(run_dir), read_sample_set(run_dir))


def solo_levels(manifest: RunManifest, lane_name: str, records: list,
                samples: SampleSet | list) -> list[LevelResult]:
    """One lane's solo levels from run.json and the raw records so far (what the adaptive sweep's
    planner reads after each step); [] before the lane's server was described."""
    prov = manifest.provenance
    lp = prov.lanes.get(lane_name) if prov is not None else None
    if prov is None or lp is None:
        return []
    records = _mark_failed(current_session_records(records), manifest.server_failures)
    lane = manifest.config.lane(lane_name)
    samples = samples if isinstance(samples, SampleSet) else sample_set(samples)
    return _levels(lane, lp, "solo", records, samples, prov.host.cores_logical,
                   plan=manifest.plan.get(lane_name, []))


def analyze_records(manifest: RunManifest, records: list, samples: SampleSet | list) -> ResultsFile:
    """Every figure of a run from its run.json (`manifest`, with provenance) and raw records (the
    samples as columns, or as records)."""
    prov = manifest.provenance
    assert prov is not None
    samples = samples if isinstance(samples, SampleSet) else sample_set(samples)
    records = current_session_records(records)  # a resumed unit counts its last session only
    records = _mark_failed(records, manifest.server_failures)
    lanes = []
    for lane in manifest.config.lanes:
        lp = prov.lanes.get(lane.name)
        if lp is None:
            continue  # the run stopped before this lane's server started
        cores = prov.host.cores_logical
        plan = manifest.plan.get(lane.name, [])
        solo = _levels(lane, lp, "solo", records, samples, cores, plan=plan)
        # a run from before --together kept to what every lane has ran the rest alone: not together
        together = _levels(lane, lp, "together", records, samples, cores, together_shape(manifest.config))
        lanes.append(LaneResult(
            lane=lane.name, model=lp.model, runtime=lp.runtime, network=lp.network, hardware=prov.host,
            workload=lane.workload, server_params=lane.server, slo=lane.slo,
            memory=lane_memory(lp.runtime, lane.server.kv_unified),
            levels=solo,
            together_levels=together, interference=interference(solo, together),
            fairness=_fairness(lane, lp, records, manifest.server_failures),
            server_failures=[f for f in manifest.server_failures if f.lane == lane.name],
            plan=plan, rates=_rates(lane, lp, records),
        ))
    return ResultsFile(
        run_id=manifest.run_id, status=manifest.status, status_reason=manifest.status_reason,
        started_at=manifest.started_at, finished_at=manifest.finished_at,
        command_line=manifest.command_line, config=manifest.config, provenance=prov, lanes=lanes,
        lanes_not_started=[f for f in manifest.server_failures if f.lane not in prov.lanes],
    )


def analyze_and_write(run_dir: Path) -> ResultsFile:
    """results.json, and verdicts.json when the fairness checks ran."""
    results = analyze_run(run_dir)
    write_results(run_dir, results)
    verdicts = verdicts_of(results)
    if verdicts is not None:
        write_verdicts(run_dir, verdicts)
    return results
