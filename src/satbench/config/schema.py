"""Typed configuration of a run: its lanes, what each one serves and how it is measured.

Everything the CLI or a lane file says ends up in one `RunConfig` (a list of `LaneConfig`),
which is written into `run.json` so that a run directory says exactly how it was produced.
Each field's type, range and default are written here only (the range types of its numbers in
config/ranges, the fairness checks' fields in config/fairness); the flag and the lane-file key that
set a lane's field are named in one table, cli/lanekeys.py (LANE_KEYS).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import (
    Field,
    StringConstraints,
    ValidationInfo,
    field_validator,
    model_validator,
)

from satbench.config.fairness import CHECK_NAMES as CHECK_NAMES
from satbench.config.fairness import CheckName as CheckName
from satbench.config.fairness import FairnessConfig as FairnessConfig
from satbench.config.limits import MAX_SERVER_ARG_CHARS, MAX_SERVER_ARGS
from satbench.config.ranges import (
    MAX_LANES,
    MAX_LEVEL,
    MAX_LEVELS_PER_LANE,
    MAX_REQUESTS_PER_LEVEL,
    BatchTokens,
    Budget,
    CtxTokens,
    Flag,
    Fraction,
    GpuLayers,
    Level,
    Milliseconds,
    Port,
    RateRps,
    Repetitions,
    RequestsPerLevel,
    RequestsPerStream,
    Retries,
    SampleInterval,
    Slots,
    Threads,
    Timeout,
    WarmupPerStream,
    number_chars,
    number_text,
    recorded,
    shown,
)
from satbench.config.strict import Strict
from satbench.config.workload import CHAT_TEMPLATE_TOKENS, WorkloadConfig
from satbench.config.workload import DEFAULT_OUTPUT_TOKENS as DEFAULT_OUTPUT_TOKENS
from satbench.config.workload import DEFAULT_PROMPT_TOKENS as DEFAULT_PROMPT_TOKENS
from satbench.config.workload import LengthDistribution as LengthDistribution

DEFAULT_LEVELS = (1, 2, 4, 8)
DEFAULT_REPETITIONS = 3
DEFAULT_CI_TARGET = 0.05
DEFAULT_REQUEST_TIMEOUT_S = 300.0
DEFAULT_BATCH_TOKENS = 2048
DEFAULT_UBATCH_TOKENS = 512
BUILTIN_MODEL = "builtin:gemma3-270m"
MODEL_DIR_ENV = "SATBENCH_MODEL_DIR"
DEFAULT_MODEL_DIR = os.path.join(".satbench", "models")


ServerArg = Annotated[str, StringConstraints(min_length=1, max_length=MAX_SERVER_ARG_CHARS)]


class ServerParams(Strict):
    """llama.cpp server knobs, named after and meaning the same as llama-server's flags.

    `None` means "let satbench choose" (n_parallel, n_ctx) or "llama.cpp's default".
    """

    n_parallel: Slots | None = Field(None, description="--parallel: number of slots")
    n_ctx: CtxTokens | None = Field(None, description="--ctx-size: total context over all slots")
    n_batch: BatchTokens = Field(DEFAULT_BATCH_TOKENS, description="--batch-size: logical batch (tokens per "
                                 "iteration)")
    n_ubatch: BatchTokens = Field(DEFAULT_UBATCH_TOKENS, description="--ubatch-size: physical batch")
    n_threads: Threads | None = Field(None, description="--threads: generation threads")
    n_gpu_layers: GpuLayers | None = Field(None, description="--n-gpu-layers (-1 = all)")
    kv_unified: Flag = Field(False, description="--kv-unified: one KV buffer shared by all slots")
    port: Port | None = Field(None, description="--port on 127.0.0.1 (None: a free one)")
    extra_args: list[ServerArg] = Field(
        default_factory=list, max_length=MAX_SERVER_ARGS,
        description="more llama-server flags and values, as on its command line (['-fa', 'on', '-ctk', "
                    "'q8_0']), checked against the server (server/server_args.py) and recorded")


RuntimeKind = Literal["embedded", "native", "url"]


class RuntimeConfig(Strict):
    """Which server satbench measures and how it gets one."""

    kind: RuntimeKind = "embedded"
    model: str | None = Field(BUILTIN_MODEL, description="GGUF path, builtin:NAME or synthetic:ARCH-SIZE; "
                              "None for url")
    model_dir: str = DEFAULT_MODEL_DIR
    server_bin: str | None = None
    url: str | None = None
    served_model: str | None = Field(None, min_length=1, description="url: the model id (one of /v1/models) "
                                     "requests name; None = the server's first listed model")
    api_key_env: str | None = Field(None, description="environment variable holding the API key")
    api_key_file: str | None = Field(None, description="file holding the API key (its path is recorded, "
                                     "never the key)")
    ca_cert: str | None = Field(None, description="PEM file of a CA or self-signed certificate trusted "
                                "besides the system's CAs")
    insecure: Flag = Field(False, description="TLS certificate verification turned OFF by the user")
    startup_timeout_s: Timeout = 180.0

    @model_validator(mode="after")
    def _consistent(self) -> RuntimeConfig:
        if self.kind == "url" and not self.url:
            raise ValueError("runtime kind 'url' needs a url")
        self._remote_options_consistent()
        if self.kind == "native" and not self.server_bin:
            raise ValueError("runtime kind 'native' needs server_bin")
        if self.served_model is not None and self.kind != "url":
            raise ValueError("served_model: only for a remote server (runtime 'url'); a started server "
                             "serves its model")
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

    p95_ttft_ms: Milliseconds
    p95_tpot_ms: Milliseconds
    p95_e2e_ms: Milliseconds | None = Field(None, description="optional end-to-end latency target")


LANE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class AdaptiveConfig(Strict):
    """The adaptive sweep (saturation/planner.py): levels doubling from 1, each level's repetitions
    (interleaved with its neighbours') until its throughput CI is narrow enough. A lane without it runs
    its fixed levels × repetitions, interleaved."""

    ci_target: Fraction = Field(DEFAULT_CI_TARGET, description="stop a level's repetitions once the "
                                "throughput 95 % CI half-width ÷ mean is at most this")
    min_repetitions: Repetitions = Field(2, description="repetitions every level gets (a CI needs two)")
    max_repetitions: Repetitions = Field(5, description="most repetitions of one level (contended ones "
                                         "re-measured besides)")
    requests_per_stream: RequestsPerStream = Field(4, description="measured requests per stream and "
                                                   "repetition (a repetition is N × this)")
    contended_retries: Retries = Field(2, description="extra repetitions of a level measured while other "
                                       "processes took CPU")
    budget_s: Budget | None = Field(None, description="wall-clock budget of the lane's adaptive sweep, "
                                    "at least 1 s; None: no budget")

    @model_validator(mode="after")
    def _reps_ordered(self) -> AdaptiveConfig:
        if self.min_repetitions > self.max_repetitions:
            raise ValueError(f"min_repetitions {self.min_repetitions} > max_repetitions "
                             f"{self.max_repetitions}")
        return self


class LaneConfig(Strict):
    """One lane (one model on one runtime configuration) and its sweep. With `adaptive`, `levels`
    bound the adaptive sweep (its highest is the ceiling of the doubling) instead of being run
    as given."""

    name: str = Field("default", pattern=LANE_NAME_PATTERN)
    levels: list[Level] = Field(default_factory=lambda: list(DEFAULT_LEVELS),
                                description=f"at most {MAX_LEVELS_PER_LANE} (new input)")
    requests_per_level: RequestsPerLevel | None = Field(
        None, description="measured requests per level and repetition; None = max(8N, 32)"
    )
    repetitions: Repetitions = DEFAULT_REPETITIONS
    warmup_per_stream: WarmupPerStream = 1
    request_timeout_s: Timeout = Field(DEFAULT_REQUEST_TIMEOUT_S, description="seconds per request, "
                                       "at least 0.1")
    read_timeout_s: Timeout = Field(60.0, description="longest silence inside one stream, at least 0.1 s")
    sample_interval_s: SampleInterval = Field(0.1, description="server sampler period")
    workload: WorkloadConfig = Field(default_factory=WorkloadConfig)
    server: ServerParams = Field(default_factory=ServerParams)
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)
    slo: SloConfig | None = None
    fairness: FairnessConfig = Field(default_factory=FairnessConfig)
    adaptive: AdaptiveConfig | None = Field(None, description="the adaptive sweep; None: the fixed levels")
    rates: list[RateRps] | None = Field(
        None, description="open-loop arrival rates (requests/s, Poisson) run after the lane's levels; None: "
        f"none (at most {MAX_LEVELS_PER_LANE})")
    rate_requests: RequestsPerLevel | None = Field(
        None, description="arrivals per open-loop rate; None = max(RATE_MIN_REQUESTS, ⌈RATE_WINDOW_S × "
        "rate⌉)")
    max_concurrency: Level | None = Field(
        None, description="open loop: requests in flight at most; an arrival beyond it waits in the client "
        "(None: the server's slots × 2)")

    @field_validator("rates")
    @classmethod
    def _rates_distinct(cls, rates: list[float] | None) -> list[float] | None:
        if rates is None:
            return None
        if not rates:
            raise ValueError("at least one rate is needed")
        if len(rates) > MAX_LEVELS_PER_LANE:
            raise ValueError(f"at most {MAX_LEVELS_PER_LANE} rates, got {len(rates)}")
        if len(set(rates)) != len(rates):
            raise ValueError(f"rates repeat: {rates}")
        return sorted(rates)

    @model_validator(mode="after")
    def _open_loop_consistent(self, info: ValidationInfo) -> LaneConfig:
        """Every field acts (NEEDS); a rate's arrivals must span at most MAX_RATE_SPAN_S (a rate of
        0.0001/s would send its 100 arrivals over 11.6 days)."""
        if recorded(info):
            return self
        for field, acts, needs in NEEDS:
            if _set(self, field) and not acts(self):
                raise NeedsError(field, needs)
        for rate in self.rates or ():
            span_s = self.arrivals_per_rate(rate) / rate
            if span_s > MAX_RATE_SPAN_S:
                raise ValueError(f"rate {rate:g}/s: its {self.arrivals_per_rate(rate):,} arrivals would take "
                                 f"about {_span_text(span_s)}, more than {_span_text(MAX_RATE_SPAN_S)}: "
                                 "raise the rate or lower rate_requests")
        return self

    def arrivals_per_rate(self, rate_rps: float) -> int:
        """Measured arrivals of one open-loop rate: the user's rate_requests, else
        max(RATE_MIN_REQUESTS, ⌈RATE_WINDOW_S × rate⌉) (about RATE_WINDOW_S seconds of arrivals, and
        enough for a p95 with a bounded CI), at most MAX_REQUESTS_PER_LEVEL."""
        if self.rate_requests is not None:
            return self.rate_requests
        return min(max(RATE_MIN_REQUESTS, math.ceil(RATE_WINDOW_S * rate_rps)), MAX_REQUESTS_PER_LEVEL)

    def open_cap(self, slots: int) -> int:
        """Requests in flight at most in the open loop: max_concurrency, else 2 × the server's slots."""
        return self.max_concurrency or min(2 * max(slots, 1), MAX_LEVEL)

    @field_validator("levels")
    @classmethod
    def _levels_positive(cls, levels: list[int], info: ValidationInfo) -> list[int]:
        if not levels:
            raise ValueError("at least one concurrency level is needed")
        if len(levels) > MAX_LEVELS_PER_LANE and not recorded(info):
            raise ValueError(f"at most {MAX_LEVELS_PER_LANE} concurrency levels, got {len(levels)}")
        if len(set(levels)) != len(levels):
            raise ValueError(f"concurrency levels repeat: {levels}")
        return sorted(levels)

    def measured_requests(self, level: int) -> int:
        """Measured requests per repetition of `level`: the user's number, else (adaptive) N ×
        requests_per_stream, else max(8N, 32)."""
        if self.requests_per_level is not None:
            return self.requests_per_level
        if self.adaptive is not None:
            return level * self.adaptive.requests_per_stream
        return design_minimum_requests(level)

    def ceiling(self, slots: int | None) -> int:
        """The highest level the lane may run: max(levels); adaptive on a running server (url) whose
        slot count is known, at least one doubling past it (2 × slots), to see the server queue."""
        if self.adaptive is not None and self.runtime.kind == "url" and slots:
            return min(max(max(self.levels), 2 * slots), MAX_LEVEL)
        return max(self.levels)

    def most_repetitions(self) -> int:
        """The most repetitions one level can get: fixed, `repetitions`; adaptive, its maximum and
        the contended ones re-measured."""
        if self.adaptive is None:
            return self.repetitions
        return self.adaptive.max_repetitions + self.adaptive.contended_retries

    def slots_wanted(self) -> int:
        """Slots to ask a server satbench starts for: the user's --parallel, else the top level."""
        return self.server.n_parallel or max(self.levels)

    def ctx_wanted(self) -> int:
        """Total context to ask for: the user's --ctx-size, else enough for every slot.

        Per-slot context is n_ctx / n_parallel unless the KV cache is unified, so each
        slot gets the longest request (`WorkloadConfig.longest_request`) + 16 tokens of margin (+
        CHAT_TEMPLATE_TOKENS with endpoint chat, for the template's own tokens), rounded up to 256.
        """
        if self.server.n_ctx is not None:
            return self.server.n_ctx
        per_slot = self.workload.longest_request() + 16
        if self.workload.endpoint == "chat":
            per_slot += CHAT_TEMPLATE_TOKENS
        per_slot = math.ceil(per_slot / 256.0) * 256
        return per_slot * self.slots_wanted()


class NeedsError(ValueError):
    """A lane sets `field` (a dotted LaneConfig path), which acts only with another one it lacks: the
    value would be recorded and change nothing. cli/lanekeys names the field's flag or lane-file key."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(message)


def _set(lane: LaneConfig, path: str) -> bool:
    """Did the lane's maker set the field (dotted path) to a value other than "none" (None, 0)?"""
    model: object = lane
    *heads, last = path.split(".")
    for head in heads:
        model = getattr(model, head)
    return last in getattr(model, "model_fields_set", ()) and getattr(model, last) not in (None, 0)


def _drawn(lane: LaneConfig) -> bool:
    return lane.workload.prompt_lengths is not None or lane.workload.output_lengths is not None


# The one table of "this field acts only with that one": (field set, does it act?, the refusal). A lane
# setting a field that would not act is refused, as a flag or a lane-file key that changes nothing.
NEEDS: tuple[tuple[str, Callable[[LaneConfig], bool], str], ...] = (
    ("rate_requests", lambda lane: lane.rates is not None,
     "it acts on open-loop rates only, and no rates are given: add rates (--rate) or drop it"),
    ("max_concurrency", lambda lane: lane.rates is not None,
     "it acts on open-loop rates only, and no rates are given: add rates (--rate) or drop it"),
    ("workload.seed", lambda lane: _drawn(lane) or lane.rates is not None,
     "it draws request lengths and open-loop arrivals, but both lengths are fixed and no --rate is "
     "given: give a length as a distribution (normal:MEAN,SD, uniform:LO-HI, jsonl:PATH) or rates"),
)
# repetitions act on fixed levels and on the together scenario's steps, which a lane cannot see: the
# lane file and the flags check them where `together` is known (cli.lanefile, cli.args)
REPETITIONS_NEED = ("it repeats fixed levels and together steps, and neither is run: the adaptive sweep "
                    "repeats each level until its CI is narrow; give fixed levels (--concurrency, "
                    "concurrency = [...]) or drop it")


def idle_repetitions(lane: LaneConfig, together: bool) -> bool:
    """Whether the lane sets repetitions that nothing in its run repeats (REPETITIONS_NEED)."""
    return lane.adaptive is not None and not together and _set(lane, "repetitions")


def design_minimum_requests(level: int) -> int:
    """At least max(8·N, 32) measured requests per level (docs/sweep.md)."""
    return max(8 * level, 32)


MAX_RATE_SPAN_S = 86_400.0  # one day: the longest an open-loop rate's arrivals may span


def _span_text(seconds: float) -> str:
    """'11.6 days', '3.2 h', '45 s': a time span as a refusal names it."""
    if seconds >= 86_400:
        return f"{seconds / 86_400:.3g} days"
    return f"{seconds / 3600:.3g} h" if seconds >= 3600 else f"{seconds:.3g} s"


RATE_WINDOW_S = 20.0  # an open-loop rate's default arrivals span about this long
RATE_MIN_REQUESTS = 100  # an open-loop rate's fewest default arrivals: a p95 needs 59 for an upper bound


def list_items(text: str, what: str) -> list[str]:
    """The items of a comma-separated flag value, each stripped of the spaces around it; ValueError
    for an empty item (two commas, one at an end, or no item at all). Repeats are the model's to refuse."""
    parts = [p.strip() for p in text.split(",")]
    if any(not p for p in parts):
        raise ValueError(f"{what}: an empty item (two commas, or one at an end) in {shown(text)}")
    return parts


def parse_rates(text: str, what: str = "rates") -> list[float]:
    """Parse a comma-separated list of rates such as "0.5,1,2" (requests/s) into numbers, each by the
    number rule (the range check is the model's); ValueError naming `what` (the flag)."""
    return [float(number_text(p, what)) for p in list_items(text, what)]


def parse_levels(text: str, what: str = "concurrency levels") -> list[int]:
    """Parse a comma-separated list such as "1,2,4,8" into integers, each by the number rule (validation
    is the model's); ValueError naming `what` (the flag)."""
    return [int(number_text(p, what, integer=True)) for p in list_items(text, what)]


def parse_duration(text: str) -> float:
    """Seconds from "90", "90s", "2m", "1.5h" or "1m30s" (ASCII digits: `number_chars`); ValueError
    naming the text otherwise."""
    number_chars(text, "")
    t = text.strip().lower()
    num = r"([0-9]+(?:\.[0-9]+)?)"
    parts = re.fullmatch(rf"(?:{num}h)?(?:{num}m)?(?:{num}s?)?", t)
    if not t or parts is None or not any(parts.groups()):
        raise ValueError(f"a duration like 90s, 2m or 1h30m, got {shown(text)}")
    h, m, sec = (float(g) if g else 0.0 for g in parts.groups())
    return h * 3600 + m * 60 + sec


def resolve_model_dir(cli_value: str | None) -> str:
    """--model-dir, else $SATBENCH_MODEL_DIR, else .satbench/models under the working directory."""
    return cli_value or os.environ.get(MODEL_DIR_ENV) or DEFAULT_MODEL_DIR


class RunConfig(Strict):
    """A run: lanes measured one after the other, optionally all at once (`together`), and
    optionally followed (or replaced, `fairness_only`) by the fairness checks of each lane."""

    lanes: list[LaneConfig] = Field(min_length=1, description=f"at most {MAX_LANES} (new input)")
    together: Flag = False
    with_fairness: Flag = False
    fairness_only: Flag = False
    refine: Flag = Field(False, description="measure 2-3 extra levels between the points bracketing the knee")
    strict: Flag = Field(False, description="refuse levels above the server's slot count instead of warning")

    @model_validator(mode="after")
    def _unique_names(self, info: ValidationInfo) -> RunConfig:
        if len(self.lanes) > MAX_LANES and not recorded(info):
            raise ValueError(f"at most {MAX_LANES} lanes, got {len(self.lanes)}")
        names = [lane.name for lane in self.lanes]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"lane names repeat: {', '.join(dup)}")
        if self.together and len(self.lanes) < 2:
            raise ValueError("together needs at least two lanes")
        if self.refine and not recorded(info) and all(lane.adaptive is not None for lane in self.lanes):
            raise ValueError("refine: it measures extra levels between fixed levels, and every lane runs "
                             "the adaptive sweep: give fixed levels (--concurrency, concurrency = [...]) or "
                             "drop it")
        return self

    def lane(self, name: str) -> LaneConfig:
        return next(lane for lane in self.lanes if lane.name == name)


def together_shape(cfg: RunConfig) -> tuple[int, int]:
    """(steps, repetitions) of the together scenario: only those every lane has, so that every
    together measurement runs under every lane's load."""
    return min(len(lane.levels) for lane in cfg.lanes), min(lane.repetitions for lane in cfg.lanes)


def not_together(cfg: RunConfig) -> list[str]:
    """One line per lane whose levels or repetitions the together scenario leaves out (another
    lane has fewer): those are measured alone only."""
    steps, reps = together_shape(cfg)
    out = []
    for lane in cfg.lanes:
        left = [f"N={n}" for n in lane.levels[steps:]]
        if lane.repetitions > reps:
            left.append(f"repetition{'s' if lane.repetitions - reps > 1 else ''} "
                        + ", ".join(str(r) for r in range(reps + 1, lane.repetitions + 1)))
        if left:
            out.append(f"lane {lane.name}: {', '.join(left)} measured alone only, not together (together "
                       f"runs the first {steps} level{'s' if steps > 1 else ''} × {reps} repetition"
                       f"{'s' if reps > 1 else ''}, what every lane has)")
    return out
