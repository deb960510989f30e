"""Hand-made lane results for the planner's tests: each level's repetitions give the tok/s asked."""

from __future__ import annotations

from satbench.analysis.results import LaneResult
from satbench.metrics.level_result import (
    Counts,
    Latency,
    LevelResult,
    Memory,
    Occupancy,
    RepetitionResult,
    Throughput,
)
from satbench.metrics.stats import distribution, mean_estimate
from tests.report.test_compare import lane


def level(n: int, rates: list[float], contended: bool = False, once_ci: float | None = None) -> LevelResult:
    """Level n: one repetition per rate; 100 latency samples with TTFT 20·n ms, TPOT 5 ms; measured
    once, with `once_ci`, its throughput CI is ± that fraction (as a batch-means CI gives it)."""
    reps = [RepetitionResult(repetition=i, status="complete", output_tok_per_s=r)
            for i, r in enumerate(rates, 1)]
    lat = Latency(ttft_ms=distribution([20.0 * n] * 100), itl_ms=distribution([5.0] * 100),
                  tpot_ms=distribution([5.0] * 100), e2e_ms=distribution([20.0 * n + 155] * 100),
                  queue_time_ms=distribution([0.0] * 100))
    est = mean_estimate(rates, floor=0.0)
    if once_ci is not None and len(rates) == 1:
        est = est.model_copy(update={"ci_low": rates[0] * (1 - once_ci), "ci_high": rates[0] * (1 + once_ci)})
    return LevelResult(concurrency=n, repetitions=reps,
                       throughput=Throughput(output_tok_per_s=est, total_tok_per_s=est, req_per_s=est),
                       latency=lat, occupancy=Occupancy(slots=4), memory=Memory(),
                       counts=Counts(requests_measured=100, requests_ok=100, requests_in_window=100,
                                     warmup_requests=0, retries=0),
                       contended="other processes used 0.80 cores" if contended else None)


def lane_result(got: dict[int, list[float]], contended_levels: set[int] = frozenset(),
                once_ci: float | None = None) -> LaneResult:
    """A lane whose solo levels are `got` (level → repetitions' tok/s); `contended_levels` with one
    contended repetition and none clean; `once_ci`: as `level`'s."""
    levels = [level(n, rates, once_ci=once_ci) for n, rates in sorted(got.items()) if rates]
    levels += [level(n, [1.0], contended=True) for n in contended_levels if not got.get(n)]
    return lane().model_copy(update={"levels": sorted(levels, key=lambda lv: lv.concurrency)})
