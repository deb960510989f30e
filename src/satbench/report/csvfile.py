"""results.csv: one row per lane × scenario × level, for spreadsheets.

Every figure is the one in results.json (same units, named in the header); an empty cell is a
figure that is unavailable (results.json says why), never a zero.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from pathlib import Path

from satbench.analysis.results import LaneResult, ResultsFile
from satbench.metrics.level_result import LevelResult
from satbench.metrics.stats import Distribution
from satbench.records.layout import CSV_FILE
from satbench.records.manifest import write_text_atomic


def _p(d: Distribution, key: str) -> float | None:
    return getattr(d, key)


def _ci(d: Distribution, key: str, end: str) -> float | None:
    ci = d.ci.get(key)
    return None if ci is None else getattr(ci, end)


# (header, value of one level); the lane-level columns come first, see _lane_cells
LEVEL_COLUMNS: list[tuple[str, Callable[[LevelResult], object]]] = [
    ("concurrency", lambda lv: lv.concurrency),
    ("output_tok_per_s", lambda lv: lv.throughput.output_tok_per_s.value),
    ("output_tok_per_s_ci_low", lambda lv: lv.throughput.output_tok_per_s.ci_low),
    ("output_tok_per_s_ci_high", lambda lv: lv.throughput.output_tok_per_s.ci_high),
    ("total_tok_per_s", lambda lv: lv.throughput.total_tok_per_s.value),
    ("req_per_s", lambda lv: lv.throughput.req_per_s.value),
    ("req_per_s_ci_low", lambda lv: lv.throughput.req_per_s.ci_low),
    ("req_per_s_ci_high", lambda lv: lv.throughput.req_per_s.ci_high),
    ("ttft_p50_ms", lambda lv: _p(lv.latency.ttft_ms, "p50")),
    ("ttft_p95_ms", lambda lv: _p(lv.latency.ttft_ms, "p95")),
    ("ttft_p95_ci_low_ms", lambda lv: _ci(lv.latency.ttft_ms, "p95", "low")),
    ("ttft_p95_ci_high_ms", lambda lv: _ci(lv.latency.ttft_ms, "p95", "high")),
    ("ttft_p99_ms", lambda lv: _p(lv.latency.ttft_ms, "p99")),
    ("itl_p50_ms", lambda lv: _p(lv.latency.itl_ms, "p50")),
    ("itl_p95_ms", lambda lv: _p(lv.latency.itl_ms, "p95")),
    ("itl_p99_ms", lambda lv: _p(lv.latency.itl_ms, "p99")),
    ("tpot_p50_ms", lambda lv: _p(lv.latency.tpot_ms, "p50")),
    ("tpot_p95_ms", lambda lv: _p(lv.latency.tpot_ms, "p95")),
    ("e2e_p50_ms", lambda lv: _p(lv.latency.e2e_ms, "p50")),
    ("e2e_p95_ms", lambda lv: _p(lv.latency.e2e_ms, "p95")),
    ("e2e_p95_ci_low_ms", lambda lv: _ci(lv.latency.e2e_ms, "p95", "low")),
    ("e2e_p95_ci_high_ms", lambda lv: _ci(lv.latency.e2e_ms, "p95", "high")),
    ("e2e_p99_ms", lambda lv: _p(lv.latency.e2e_ms, "p99")),
    ("queue_time_p50_ms_estimate", lambda lv: _p(lv.latency.queue_time_ms, "p50")),
    ("queue_time_p95_ms_estimate", lambda lv: _p(lv.latency.queue_time_ms, "p95")),
    ("slots", lambda lv: lv.occupancy.slots),
    ("busy_slots_time_weighted", lambda lv: lv.occupancy.time_weighted_busy_slots),
    ("busy_slots_decode_weighted", lambda lv: lv.occupancy.decode_weighted_busy_slots),
    ("client_in_flight", lambda lv: lv.occupancy.client_in_flight),
    ("requests_deferred_max", lambda lv: lv.occupancy.requests_deferred_max),
    ("peak_rss_bytes", lambda lv: lv.memory.peak_rss_bytes),
    ("peak_gpu_mem_bytes", lambda lv: lv.memory.peak_gpu_mem_bytes),
    ("server_cpu_cores", lambda lv: lv.memory.server_cpu_cores),
    ("host_busy_cores", lambda lv: lv.memory.host_busy_cores),
    ("client_cpu_cores", lambda lv: lv.memory.client_cpu_cores),
    ("slo_attainment", lambda lv: lv.slo_attainment),
    ("goodput_req_per_s", lambda lv: lv.goodput_req_per_s),
    ("latency_samples", lambda lv: lv.latency.e2e_ms.n),
    ("requests_measured", lambda lv: lv.counts.requests_measured),
    ("requests_ok", lambda lv: lv.counts.requests_ok),
    ("errors", lambda lv: sum(lv.counts.errors_by_type.values())),
    ("retries", lambda lv: lv.counts.retries),
    ("flags", lambda lv: " | ".join(lv.flags)),
]
LANE_COLUMNS = ["run_id", "lane", "scenario", "model", "model_sha256", "synthetic_weights", "runtime",
                "llamacpp_build", "backend", "hardware_fingerprint", "prompt_tokens", "output_tokens"]


def _lane_cells(results: ResultsFile, lane: LaneResult, scenario: str) -> list[object]:
    return [results.run_id, lane.lane, scenario, lane.model.path or lane.runtime.model_alias,
            lane.model.sha256, lane.model.synthetic, lane.runtime.kind, lane.runtime.build_number,
            lane.runtime.backend, lane.hardware.fingerprint_sha256, lane.workload.prompt_tokens,
            lane.workload.output_tokens]


def _cell(v: object) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(round(v, 6))
    return str(v)


def render_csv(results: ResultsFile) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(LANE_COLUMNS + [name for name, _ in LEVEL_COLUMNS])
    for lane in results.lanes:
        for scenario, levels in (("solo", lane.levels), ("together", lane.together_levels)):
            for lv in levels:
                w.writerow([_cell(v) for v in _lane_cells(results, lane, scenario)]
                           + [_cell(get(lv)) for _, get in LEVEL_COLUMNS])
    return buf.getvalue()


def write_csv(run_dir: Path, results: ResultsFile) -> Path:
    path = run_dir / CSV_FILE
    write_text_atomic(path, render_csv(results), run_dir=run_dir)
    return path
