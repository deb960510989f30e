"""The figures of one measured level (LevelResult) and what they were computed under
(LevelContext): the typed record that metrics/level.py fills and metrics/unavailable.py explains."""

from __future__ import annotations

from pydantic import Field

from satbench.config.schema import SloConfig
from satbench.metrics.cache import CacheFigures
from satbench.metrics.flags import Flag
from satbench.metrics.gpu import GpuUse
from satbench.metrics.little import LittleCheck
from satbench.metrics.stats import Distribution, Estimate
from satbench.records.events import CANCELLED
from satbench.records.record import Record


class LevelContext(Record):
    """What a level's analysis needs besides the records: server shape and workload."""

    lane: str
    level: int
    repetitions_planned: int
    measured_requests_planned: int
    slots: int | None
    per_slot_ctx: int | None
    prompt_tokens: int
    output_tokens: int
    overhead_ms: float
    llamacpp: bool
    slo: SloConfig | None = None
    host_cores: int | None = None
    level_total_planned: int | None = Field(None, description="adaptive: the measured requests planned "
                                            "over all the level's repetitions (the design minimum applies "
                                            "to them); None: fixed levels (it applies per repetition)")
    server_remote: bool = Field(False, description="a url lane over a remote network path: the server's "
                                "process and GPU are on another machine")
    one_repetition_ci: bool = Field(False, description="a level measured once gets a throughput CI from "
                                    "its batch means (metrics/throughput.py)")


class RepetitionResult(Record):
    repetition: int
    status: str
    status_reason: str | None = None
    window_start_ns: int | None = None
    window_end_ns: int | None = None
    window_s: float | None = None
    no_window_reason: str | None = None
    output_tokens_in_window: int | None = None
    throughput_streams: int | None = Field(None, description="streams with a measured request running in the "
                                           "window: the rates are taken from them")
    output_tok_per_s: float | None = None
    total_tok_per_s: float | None = None
    req_per_s: float | None = None
    p95_ttft_ms: float | None = Field(None, description="p95 of this repetition's latency sample alone (the "
                                      "spread of these across repetitions gives compare and interference "
                                      "their CI)")
    p95_itl_ms: float | None = None
    p95_e2e_ms: float | None = None
    cache_hit_ratio: float | None = Field(None, description="this repetition's prompt-cache hit ratio "
                                          "(metrics/cache.py hit_ratio); None without llama.cpp timings")
    requests_completed_in_window: int = 0
    requests_measured: int = 0
    errors: int = 0
    retries: int = 0


class Throughput(Record):
    output_tok_per_s: Estimate
    total_tok_per_s: Estimate
    req_per_s: Estimate


class Latency(Record):
    ttft_ms: Distribution
    itl_ms: Distribution
    tpot_ms: Distribution
    e2e_ms: Distribution
    queue_time_ms: Distribution = Field(description="estimate: TTFT − prompt_ms − loopback overhead")


class Occupancy(Record):
    slots: int | None
    time_weighted_busy_slots: float | None = None
    time_weighted_source: str | None = None
    decode_weighted_busy_slots: float | None = None
    client_in_flight: float | None = None
    time_weighted_fraction: float | None = None
    decode_weighted_fraction: float | None = None
    client_in_flight_fraction: float | None = None
    requests_deferred_max: float | None = None


class Memory(Record):
    peak_rss_bytes: int | None = None
    peak_gpu_mem_bytes: int | None = None
    server_cpu_cores: float | None = None
    host_busy_cores: float | None = Field(None, description="whole machine, all processes, mean over "
                                                            "repetitions")
    client_cpu_cores: float | None = Field(None, description="satbench's own process, mean over repetitions")


class Counts(Record):
    requests_measured: int
    requests_ok: int
    requests_in_window: int
    warmup_requests: int
    retries: int
    errors_by_type: dict[str, int] = Field(default_factory=dict)

    def server_errors(self) -> dict[str, int]:
        """errors_by_type without the requests satbench itself cancelled when it stopped the level."""
        return {k: v for k, v in self.errors_by_type.items() if k != CANCELLED}


class LevelResult(Record):
    concurrency: int
    repetitions: list[RepetitionResult]
    throughput: Throughput
    latency: Latency
    occupancy: Occupancy
    memory: Memory
    gpu: GpuUse | None = Field(None, description="NVML figures; None (unavailable) without a GPU")
    cache: CacheFigures | None = Field(None, description="prompt-cache figures from llama.cpp's timings "
                                       "cache_n and prompt_n; None when no measured request has them")
    littles_law: LittleCheck | None = None
    slo_attainment: float | None = Field(None, description="share of window requests meeting both SLO "
                                                           "targets "
                                        "(failed requests ending in the window count as missing it)")
    goodput_req_per_s: float | None = Field(None, description="req/s of requests meeting both SLO targets")
    counts: Counts
    flags: list[Flag] = Field(default_factory=list)  # "<kind>: <detail>" each (metrics/flags.py)
    unavailable: dict[str, str] = Field(default_factory=dict)
    contended: str | None = Field(None, description="why the level's repetitions ran contended (other "
                                  "processes took CPU, metrics/contention.py); such a level is kept but "
                                  "neither makes nor moves the knee. None: clean")
    excluded_repetitions: dict[int, str] = Field(
        default_factory=dict, description="repetition → why it was contended: left out of every figure "
                                          "of the level (enough clean ones remained)")
