"""Typed configuration of a run: its lanes, what each one serves and how it is measured.

Everything the CLI or a lane file says ends up in one `RunConfig` (a list of `LaneConfig`),
which is written into `run.json` so that a run directory says exactly how it was produced.
"""

from __future__ import annotations

import math
import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

DEFAULT_LEVELS = (1, 2, 4, 8)
DEFAULT_PROMPT_TOKENS = 64
DEFAULT_OUTPUT_TOKENS = 32
DEFAULT_REPETITIONS = 3
BUILTIN_MODEL = "builtin:gemma3-270m"
MODEL_DIR_ENV = "SATBENCH_MODEL_DIR"
DEFAULT_MODEL_DIR = os.path.join(".satbench", "models")


class Strict(BaseModel):
    """Base for every model that crosses a module boundary: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")


class ServerParams(Strict):
    """llama.cpp server knobs, named after and meaning the same as llama-server's flags.

    `None` means "let satbench choose" (n_parallel, n_ctx) or "llama.cpp's default".
    """

    n_parallel: int | None = Field(None, ge=1, description="--parallel: number of slots")
    n_ctx: int | None = Field(None, ge=64, description="--ctx-size: total context over all slots")
    n_batch: int = Field(2048, ge=1, description="--batch-size: logical batch (tokens per iteration)")
    n_ubatch: int = Field(512, ge=1, description="--ubatch-size: physical batch")
    n_threads: int | None = Field(None, ge=1, description="--threads: generation threads")
    n_gpu_layers: int | None = Field(None, description="--n-gpu-layers (-1 = all)")
    kv_unified: bool = Field(False, description="--kv-unified: one KV buffer shared by all slots")
    port: int | None = Field(None, ge=1, le=65535, description="--port on 127.0.0.1 (None: a free one)")


class WorkloadConfig(Strict):
    """What every request of a sweep looks like."""

    prompt_tokens: int = Field(DEFAULT_PROMPT_TOKENS, ge=8)
    output_tokens: int = Field(DEFAULT_OUTPUT_TOKENS, ge=2)
    shared_prefix: bool = Field(
        False, description="all requests share one prompt and may hit the prompt cache"
    )


RuntimeKind = Literal["embedded", "native", "url"]


class RuntimeConfig(Strict):
    """Which server satbench measures and how it gets one."""

    kind: RuntimeKind = "embedded"
    model: str | None = Field(BUILTIN_MODEL, description="GGUF path, builtin:NAME or synthetic:ARCH-SIZE; None for url")
    model_dir: str = DEFAULT_MODEL_DIR
    server_bin: str | None = None
    url: str | None = None
    served_model: str | None = Field(None, min_length=1, description="url: the model id (one of /v1/models) "
                                     "requests name; None = the server's first listed model")
    api_key_env: str | None = Field(None, description="environment variable holding the API key")
    api_key_file: str | None = Field(None, description="file holding the API key (its path is recorded, never the key)")
    ca_cert: str | None = Field(None, description="PEM file of a CA or self-signed certificate trusted besides the "
                                "system's CAs")
    insecure: bool = Field(False, description="TLS certificate verification turned OFF by the user")
    startup_timeout_s: float = Field(180.0, gt=0)

    @model_validator(mode="after")
    def _consistent(self) -> RuntimeConfig:
        if self.kind == "url" and not self.url:
            raise ValueError("runtime kind 'url' needs a url")
        self._remote_options_consistent()
        if self.kind == "native" and not self.server_bin:
            raise ValueError("runtime kind 'native' needs server_bin")
        if self.served_model is not None and self.kind != "url":
            raise ValueError("served_model: only for a remote server (runtime 'url'); a started server serves "
                             "its model")
        if self.kind != "url" and not self.model:
            raise ValueError(f"runtime kind {self.kind!r} needs a model")
        return self

    def _remote_options_consistent(self) -> None:
        """Keys and TLS options belong to a remote server; the key has one source."""
        given = [k for k in ("api_key_env", "api_key_file", "ca_cert", "insecure") if getattr(self, k)]
        if given and self.kind != "url":
            raise ValueError(f"{', '.join(given)}: only for a remote server (runtime 'url')")
        if self.api_key_env and self.api_key_file:
            raise ValueError("api_key_env and api_key_file are mutually exclusive: give one")
        if self.ca_cert and self.insecure:
            raise ValueError("ca_cert and insecure contradict each other: give one")
        if (self.ca_cert or self.insecure) and not (self.url or "").lower().startswith("https://"):
            raise ValueError("ca_cert and insecure apply to an https:// url only")


class SloConfig(Strict):
    """A lane's latency objective: p95 TTFT and p95 TPOT, and optionally p95 E2E, in milliseconds."""

    p95_ttft_ms: float = Field(gt=0)
    p95_tpot_ms: float = Field(gt=0)
    p95_e2e_ms: float | None = Field(None, gt=0, description="optional end-to-end latency target")


class FairnessConfig(Strict):
    """Workload sizes and thresholds of the fairness and starvation checks (DESIGN.md §6).

    Every bound is derived from the lane's own measurements (prefill rate at N = 1, decode
    iteration time); these numbers only scale them. Override any of them per lane in the lane
    file under [lanes.fairness].
    """

    checks: list[Literal["F1", "F2", "F3", "S1", "S2", "S3"]] = Field(
        default_factory=lambda: ["F1", "F2", "F3", "S1", "S2", "S3"], min_length=1,
        description="which checks to run (all six by default)")
    f1_streams: int | None = Field(None, ge=2, description="F1 concurrency (default min(slots, 4))")
    f1_requests_per_stream: int = Field(6, ge=3)
    f1_max_min_ratio: float = Field(1.10, gt=1.0, description="max/min per-request decode rate")
    f1_jain_min: float = Field(0.99, gt=0.0, le=1.0)
    f1_ttft_iterations: float = Field(2.0, ge=0.0, description="iterations added to Σprompt ÷ prefill rate")
    f2_slowdown_factor: float = Field(1.1, gt=0.0, description="bound = factor × N")
    f2_repetitions: int = Field(3, ge=1)
    f3_extra_clients: int | None = Field(None, ge=1, description="clients beyond the slots (default max(2, slots/2))")
    f3_requests_per_client: int = Field(6, ge=3)
    f3_diff_costliest: float = Field(2.0, gt=0.0, description="max service gap, in costliest requests")
    f3_trend_costliest: float = Field(1.0, gt=0.0, description="max fitted growth of the gap over the window")
    s1_prompt_batches: float = Field(3.0, ge=1.5, description="injected prompt = this × n_batch tokens")
    s1_decoders: int | None = Field(None, ge=1, description="decoding streams (default min(slots - 1, 3))")
    s1_batch_factor: float = Field(1.5, gt=0.0, description="max ITL ≤ factor × n_batch ÷ prefill rate + baseline")
    s1_prefill_factor: float = Field(1.25, gt=1.0, description="injected prefill ≤ factor × its solo time")
    s1_stall_factor: float = Field(3.0, gt=1.0, description="a stall is an ITL > factor × baseline median")
    s2_iterations: float = Field(2.0, gt=0.0)
    s2_probes: int = Field(5, ge=1)
    s3_iterations: float = Field(2.0, gt=0.0)
    s3_prompt_batches: float = Field(1.0, gt=0.0, description="each prompt = this × n_batch tokens")
    s3_repetitions: int = Field(2, ge=1)


LANE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class LaneConfig(Strict):
    """One lane (one model on one runtime configuration) and its sweep."""

    name: str = Field("default", pattern=LANE_NAME_PATTERN)
    levels: list[int] = Field(default_factory=lambda: list(DEFAULT_LEVELS))
    requests_per_level: int | None = Field(
        None, ge=1, description="measured requests per level and repetition; None = max(8N, 32)"
    )
    repetitions: int = Field(DEFAULT_REPETITIONS, ge=1)
    warmup_per_stream: int = Field(1, ge=0)
    request_timeout_s: float = Field(300.0, gt=0)
    read_timeout_s: float = Field(60.0, gt=0, description="longest silence inside one stream")
    sample_interval_s: float = Field(0.1, gt=0, le=1.0, description="server sampler period")
    workload: WorkloadConfig = Field(default_factory=WorkloadConfig)
    server: ServerParams = Field(default_factory=ServerParams)
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)
    slo: SloConfig | None = None
    fairness: FairnessConfig = Field(default_factory=FairnessConfig)

    @field_validator("levels")
    @classmethod
    def _levels_positive(cls, levels: list[int]) -> list[int]:
        if not levels:
            raise ValueError("at least one concurrency level is needed")
        if any(n < 1 for n in levels):
            raise ValueError(f"concurrency levels must be positive integers, got {levels}")
        if len(set(levels)) != len(levels):
            raise ValueError(f"concurrency levels repeat: {levels}")
        return sorted(levels)

    def measured_requests(self, level: int) -> int:
        """Measured requests per repetition of `level`: the user's number, else max(8N, 32)."""
        if self.requests_per_level is not None:
            return self.requests_per_level
        return design_minimum_requests(level)

    def slots_wanted(self) -> int:
        """Slots to ask a server satbench starts for: the user's --parallel, else the top level."""
        return self.server.n_parallel or max(self.levels)

    def ctx_wanted(self) -> int:
        """Total context to ask for: the user's --ctx-size, else enough for every slot.

        Per-slot context is n_ctx / n_parallel unless the KV cache is unified, so each
        slot gets prompt + output + 16 tokens of margin, rounded up to 256.
        """
        if self.server.n_ctx is not None:
            return self.server.n_ctx
        per_slot = self.workload.prompt_tokens + self.workload.output_tokens + 16
        per_slot = int(math.ceil(per_slot / 256.0)) * 256
        return per_slot * self.slots_wanted()


def design_minimum_requests(level: int) -> int:
    """DESIGN.md §5: at least max(8·N, 32) measured requests per level."""
    return max(8 * level, 32)


def parse_levels(text: str) -> list[int]:
    """Parse a comma-separated list such as "1,2,4,8" into integers (validation is the model's)."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    try:
        return [int(p) for p in parts]
    except ValueError as exc:
        raise ValueError(f"concurrency levels must be integers like 1,2,4,8, got {text!r}") from exc


def resolve_model_dir(cli_value: str | None) -> str:
    """--model-dir, else $SATBENCH_MODEL_DIR, else .satbench/models under the working directory."""
    return cli_value or os.environ.get(MODEL_DIR_ENV) or DEFAULT_MODEL_DIR


class RunConfig(Strict):
    """A run: lanes measured one after the other, optionally all at once (`together`), and
    optionally followed (or replaced, `fairness_only`) by the fairness checks of each lane."""

    lanes: list[LaneConfig] = Field(min_length=1)
    together: bool = False
    with_fairness: bool = False
    fairness_only: bool = False
    refine: bool = Field(False, description="measure 2-3 extra levels between the points bracketing the knee")
    strict: bool = Field(False, description="refuse levels above the server's slot count instead of warning")

    @model_validator(mode="after")
    def _unique_names(self) -> RunConfig:
        names = [lane.name for lane in self.lanes]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"lane names repeat: {', '.join(dup)}")
        if self.together and len(self.lanes) < 2:
            raise ValueError("together needs at least two lanes")
        return self

    def lane(self, name: str) -> LaneConfig:
        return next(lane for lane in self.lanes if lane.name == name)
