"""The recommendations.json model (docs/recommendations.md): per lane and machine, how many requests at once.

`RecommendationsFile` holds one `LaneRecommendation` per lane with measured levels: the recommended
concurrency, every cap on it and the binding one, what the lane delivers there (`Expected`) and
what the server showed (`ServerConfirmation`); `DEFINITIONS` restates the rules behind each figure
(saturation/recommend applies them; docs/definitions.md#recommendations states each). The published
JSON Schema carries RECOMMENDATIONS_SCHEMA_VERSION.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from satbench.config.schema import SloConfig, Strict
from satbench.config.workload_profile import NOT_RECORDED, WorkloadProfile
from satbench.metrics.slot_memory import MARGIN_TEXT, LaneMemory
from satbench.metrics.stats import Estimate, Interval
from satbench.records.artifacts import published_schema, write_artifact
from satbench.records.layout import RECOMMENDATIONS_FILE
from satbench.records.manifest import HostInfo, ModelInfo, RuntimeInfo
from satbench.saturation.bound import BusyVariant, Resource, Saturation
from satbench.saturation.confidence import Confidence
from satbench.saturation.open_rate import RateRecommendation
from satbench.saturation.usl import UslFit

RECOMMENDATIONS_SCHEMA_VERSION = "1.15"  # what each version added: docs/schemas.md
ERROR_SHARE_MAX = 0.01  # a level where more than 1 % of measured requests failed is not a safe limit
Reason = Literal["server_failed", "errors", "fairness", "slo", "slots", "memory", "knee", "highest_measured",
                 "undetermined"]


class LevelSummary(Strict):
    concurrency: int
    output_tok_per_s: Estimate
    p95_ttft_ms: float | None
    p95_tpot_ms: float | None
    slo_attainment: float | None = None


class Expected(Strict):
    """What the lane delivers at the recommended concurrency (measured there, with 95 % CIs)."""

    concurrency: int
    output_tok_per_s: Estimate
    p95_ttft_ms: float | None
    p95_ttft_ci: Interval | None
    p95_tpot_ms: float | None
    p95_tpot_ci: Interval | None
    peak_rss_bytes: int | None
    peak_gpu_mem_bytes: int | None


class ServerConfirmation(Strict):
    at_concurrency: int
    slots: int | None
    busy_slots_per_decode: float | None = Field(description="the decode-weighted busy slots (null without "
                                                            "/metrics)")
    busy_slots: float | None = Field(None, description="what slots_saturated reads: the decode-weighted "
                                                       "figure, "
                                     "else the time-weighted one (busy_slots_variant says which)")
    busy_slots_variant: BusyVariant | None = None
    requests_deferred_max: float | None
    itl_p50_ms_by_level: dict[int, float | None]
    slots_saturated: bool
    requests_deferred: bool | None = Field(description="requests_deferred_max > 0; null when unknown (no "
                                                       "/metrics)")
    decode_time_rising: bool
    statement: str


class Binding(Strict):
    reason: Reason
    resource: Resource | Literal["memory"] | None = Field(
        None, description="what saturated, when the knee binds: gpu, server_cpu, slots or undetermined "
                          "(saturation.statement says why); memory when the slots that fit bind")
    detail: str


class LaneRecommendation(Strict):
    lane: str
    hardware_fingerprint: str
    hardware: HostInfo
    model: ModelInfo
    runtime: RuntimeInfo
    workload: WorkloadProfile = Field(
        NOT_RECORDED, description="the traffic every figure was measured with (the lane's workload in "
        "results.json); a file before schema 1.15 did not record it and reads as random, lengths null")
    server_on_measuring_machine: bool | None = Field(
        None, description="the server ran on the machine that measured it, whose hardware this describes "
                          "(false: a url lane measured from another machine; null: recorded before this was)")
    recommended_concurrency: int | None = Field(description="None: no measured level is at or below the "
                                                "binding limit (binding.detail says why); undetermined: the "
                                                "lower end of recommended_range")
    recommended_range: tuple[int, int] | None = Field(
        None, description="undetermined: the answer lies between these levels (not settled); null: settled")
    max_concurrency_under_slo: int | None
    slo: SloConfig | None
    knee: int | None
    knee_reason: str
    curve_shape: str = Field("", description="throughput against N in words, e.g. 'flat from 1 to 2, rising "
                                             "from 2 to 8 (not concave: a flat step below a rise)'")
    knee_ceiling: int | None = Field(None, description="the level the knee is judged against: the slots, at "
                                     "most the lane's highest level and below a failed one")
    kneedle_knee: int | None
    slots: int | None
    fairness_cap: int | None
    fairness_failures: list[str] = Field(default_factory=list)
    fairness_marginal: list[str] = Field(default_factory=list, description="checks left marginal (their CI "
                                         "straddles the bound): a warning beside the recommendation, not a "
                                         "cap")
    fairness_unverified: list[str] = Field(
        default_factory=list, description="checks inconclusive at a concurrency at or below the answer: "
        "fairness there is not verified, so the answer is a range from the highest measured level below")
    server_failure_cap: int | None = Field(None, description="below the lowest level whose server failed")
    server_failures: list[str] = Field(default_factory=list)
    error_cap: int | None = Field(None, description="below the lowest level where more than "
                                                    f"{ERROR_SHARE_MAX:.0%} "
                                  "of measured requests failed")
    error_levels: list[str] = Field(default_factory=list)
    memory: LaneMemory | None = Field(None, description="cache per slot, slots that fit (results.json)")
    memory_cap: int | None = Field(None, description="the slots that fit in the memory left after loading")
    binding: Binding
    saturation: Saturation | None = Field(None, description="what limits throughput past the knee")
    expected: Expected | None = Field(description="None when recommended_concurrency is None")
    usl: UslFit
    server_confirmation: ServerConfirmation
    measured_levels: list[LevelSummary]
    measured_at: str
    command_line: list[str]
    undetermined: str | None = Field(None, description="why the answer is a range (recommended_range): a "
                                     "level above may still gain, or the ceiling is not measured, and no "
                                     "other cap binds below it (null: decided)")
    contended: bool = Field(False, description="a level it rests on ran while other processes took CPU")
    contended_levels: list[int] = Field(default_factory=list)
    confidence: Confidence | None = Field(None, description="P that a level above the recommendation that "
                                          "could change it gains (null: no clean point at the "
                                          "recommendation)")
    plan_stop: str | None = Field(None, description="why the adaptive sweep stopped (null: fixed levels)")
    rate: RateRecommendation | None = Field(None, description="the open-loop rates (--rate): the highest "
                                            "meeting the SLO from arrival; null when none ran")


DEFINITIONS = {
    "recommended_concurrency": "the largest measured level at or below the tightest of knee, slo_bound, "
                               "slots, memory_cap, fairness_cap, server_failure_cap and error_cap (the "
                               "binding one is named); null when no measured level is that low; when the "
                               "knee is undetermined, the lower end of recommended_range",
    "knee": "from the lowest level, the candidate moves to a higher level only when that level's output "
            "tok/s is a gain shown over the candidate's: >= 10% per doubling of N on average and above the "
            "upper end of the candidate's 95% CI. The knee stands only with evidence of no gain above it: "
            "for every measured higher level h, P(X(h) >= 1.1^log2(h/k) X(k)) < 5% (Welch's t over the "
            "repetitions), and with the ceiling (knee_ceiling) measured; a flat step below the ceiling may "
            "be a plateau. None when the candidate is the highest level and that is the ceiling (still "
            "rising), or when undetermined",
    "slo_bound": "the largest N whose 95% upper bounds of p95 TTFT and p95 TPOT (and p95 E2E when set) "
                 "are within the targets with >= 90% of requests meeting all (a failed request misses), "
                 "with no lower level seen to miss (a p95 estimate or its upper bound over a target, or "
                 "attainment below 90%); a p95's upper bound is one-sided: its CI's upper end, else the "
                 "largest sample from 59 samples (below the p95 with probability 0.95^n <= 5%); a level "
                 "whose p95 has too few samples for an upper bound (59) "
                 "neither sets nor breaks it, as a lower level's p95 latencies are taken not to exceed a "
                 "higher one's",
    "fairness_cap": "one below the lowest concurrency at which a fairness or starvation check failed (at "
                    "least 1); a marginal check (its CI straddles the bound after its top-ups) does not "
                    "bind: fairness_marginal lists it",
    "slo_range": "an answer bound by the SLO below a measured level that is not seen to miss it but whose "
                 "p95s are not bounded yet (fewer than 59 samples) is recommended_range [answer, that level] "
                 "when the curve and the other limits allow it",
    "fairness_unverified": "a check inconclusive at concurrency c (the host too unsteady for its reference, "
                           "its situation not created) verifies nothing at c or above: an answer at or "
                           "above c becomes recommended_range [the highest measured level below c, the "
                           "answer], recommending its lower end (binding fairness)",
    "server_failure_cap": "one below the lowest concurrency at which the lane's server crashed or stopped "
                          "answering",
    "memory_cap": "memory.slots_fit: the server's slots plus the cache slots that fit in the memory left "
                  f"after loading (GPU free or RAM available, less {MARGIN_TEXT}) at the lane's per-slot "
                  "context; below the slots when the server leaves less than that free",
    "error_cap": "one below the lowest level where more than 1% of measured requests failed (cancelled ones "
                 "excepted)",
    "expected": "the recommended level's measured output tok/s (results.json: whole requests in the steady "
                "window) and p95 TTFT / TPOT, with their 95% CIs",
    "usl": "X(N) = X(1) N / (1 + alpha (N-1) + beta N (N-1)), alpha, beta >= 0 by bounded least squares; "
           "peak N* = sqrt((1 - alpha) / beta) reported only when beta's 95% CI excludes 0 and R^2 >= 0.9",
    "kneedle": "Kneedle on (log2 N, X) with >= 5 levels, beside the knee for comparison",
    "undetermined": "a measured level above the candidate may still gain (P(gain) >= 5%), or the ceiling is "
                    "not measured: the answer is recommended_range [candidate, the highest level that may "
                    "gain or the ceiling, at most the other limits] and recommended_concurrency its lower "
                    "end, unless another cap binds at or below the candidate",
    "contended": "a level measured while other processes took CPU (results.json definitions: contended) "
                 "is kept but neither makes nor moves the knee; contended is true when any level of the "
                 "lane still ran contended",
    "rate.max_rate_rps": "the largest measured open-loop rate R (Poisson arrivals, at most max_concurrency "
                         "in flight) such that R and every lower rate completed, lost no request and kept "
                         "p95 TTFT from arrival, p95 TPOT and (when set) p95 E2E from arrival within the "
                         "SLO; null without an SLO or when the lowest rate misses",
    "rate.goodput_rps": "requests that met every SLO target from their arrival, per second of the rate's run",
    "workload": "the traffic the lane was measured with (kind, lengths, a chat's turns, think time and "
                "system prompt, a trace's sha256 and speed): every figure holds for it; the capability "
                "report refuses a lane configured for other traffic unless --accept-workload",
    "confidence": "for every clean measured level h above the recommendation r and within the other limits, "
                  "P(X(h) >= 1.1^log2(h/r) X(r)) by Welch's t over their repetitions; settled when each is "
                  "below 5% and the ceiling is measured or reached",
}


class RecommendationsFile(Strict):
    schema_version: str = RECOMMENDATIONS_SCHEMA_VERSION
    definitions: dict[str, str] = Field(default_factory=lambda: dict(DEFINITIONS),
                                        description="the rules behind every figure, restated")
    created_at: str
    satbench_version: str = Field(description="the satbench that measured the run (with satbench_commit)")
    satbench_commit: str | None
    run_id: str
    results_sha256: str
    lanes: list[LaneRecommendation]


def recommendations_json_schema() -> dict:
    return published_schema(RecommendationsFile, "recommendations", RECOMMENDATIONS_SCHEMA_VERSION)


def write_recommendations(run_dir: Path, recs: RecommendationsFile) -> Path:
    return write_artifact(run_dir / RECOMMENDATIONS_FILE, recs, recommendations_json_schema())
