"""Raw files → results.json. The sweep calls this too, so `satbench analyze` reproduces it byte for byte."""

from __future__ import annotations

from pathlib import Path

from satbench.errors import RunDirError
from satbench.events import LevelMark, RequestEvent, read_events, read_samples
from satbench.manifest import read_manifest
from satbench.metrics.level import LevelContext, summarize_level
from satbench.results import LaneResult, ResultsFile, write_results


def analyze_run(run_dir: Path) -> ResultsFile:
    """Recompute every figure of a run from run.json, events.jsonl and server_samples.jsonl."""
    manifest = read_manifest(run_dir)
    if manifest.provenance is None:
        raise RunDirError(f"{run_dir}: the run stopped before the server was described; nothing to analyze")
    records = read_events(run_dir)
    samples = read_samples(run_dir)
    cfg, prov = manifest.config, manifest.provenance
    lane = cfg.lane
    events = [r for r in records if isinstance(r, RequestEvent) and r.lane == lane]
    marks = [r for r in records if isinstance(r, LevelMark) and r.lane == lane]
    lane_samples = [s for s in samples if s.lane == lane]
    overhead_ms = prov.network.rtt_ms_median or 0.0
    levels = []
    seen_levels = sorted({e.level for e in events} | {m.level for m in marks})
    for n in seen_levels:
        ctx = LevelContext(
            lane=lane, level=n, repetitions_planned=cfg.repetitions,
            measured_requests_planned=cfg.measured_requests(n),
            slots=prov.runtime.total_slots, per_slot_ctx=prov.runtime.per_slot_ctx,
            prompt_tokens=cfg.workload.prompt_tokens, output_tokens=cfg.workload.output_tokens,
            overhead_ms=overhead_ms, llamacpp=prov.runtime.llamacpp,
        )
        levels.append(summarize_level(
            ctx,
            [e for e in events if e.level == n],
            [m for m in marks if m.level == n],
            lane_samples,
        ))
    lane_result = LaneResult(
        lane=lane, model=prov.model, runtime=prov.runtime, workload=cfg.workload,
        server_params=cfg.server, levels=levels,
    )
    return ResultsFile(
        run_id=manifest.run_id, status=manifest.status, status_reason=manifest.status_reason,
        started_at=manifest.started_at, finished_at=manifest.finished_at,
        command_line=manifest.command_line, config=cfg, provenance=prov, lanes=[lane_result],
    )


def analyze_and_write(run_dir: Path) -> ResultsFile:
    results = analyze_run(run_dir)
    write_results(run_dir, results)
    return results
