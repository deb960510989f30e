"""Typed configuration of a run: its lanes, what each one serves and how it is measured.

Everything the CLI or a lane file says ends up in one `RunConfig` (a list of `LaneConfig`),
which is written into `run.json` so that a run directory says exactly how it was produced.
Each field's type, range and default are written here only (the range types of its numbers in
config/ranges, the fairness checks' fields in config/fairness, the runtime's in config/runtime, the
adaptive sweep's in config/profiles); the flag and the lane-file key that set a lane's field are named
in one table, cli/lanekeys.py (LANE_KEYS). What a lane's runtime kind means is its class's
(config/runtime); what its levels, adaptive sweep and rates mean is its load profiles'
(`LaneConfig.profile`, `LaneConfig.open_loop`: config/profiles).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Annotated

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
from satbench.config.flagtext import list_items as list_items
from satbench.config.flagtext import parse_duration as parse_duration
from satbench.config.flagtext import parse_levels as parse_levels
from satbench.config.flagtext import parse_rates as parse_rates
from satbench.config.limits import MAX_SERVER_ARG_CHARS, MAX_SERVER_ARGS
from satbench.config.profiles import DEFAULT_CI_TARGET as DEFAULT_CI_TARGET
from satbench.config.profiles import MAX_RATE_SPAN_S as MAX_RATE_SPAN_S
from satbench.config.profiles import RATE_MIN_REQUESTS as RATE_MIN_REQUESTS
from satbench.config.profiles import RATE_WINDOW_S as RATE_WINDOW_S
from satbench.config.profiles import AdaptiveConfig as AdaptiveConfig
from satbench.config.profiles import AdaptiveSweep, ClosedLoop, FixedLevels, OpenRates
from satbench.config.profiles import design_minimum_requests as design_minimum_requests
from satbench.config.ranges import (
    MAX_LANES,
    MAX_LEVELS_PER_LANE,
    BatchTokens,
    CtxTokens,
    Flag,
    GpuLayers,
    Level,
    Milliseconds,
    Port,
    RateRps,
    Repetitions,
    RequestsPerLevel,
    SampleInterval,
    Slots,
    Threads,
    Timeout,
    WarmupPerStream,
    recorded,
)
from satbench.config.runtime import BUILTIN_MODEL as BUILTIN_MODEL
from satbench.config.runtime import DEFAULT_MODEL_DIR as DEFAULT_MODEL_DIR
from satbench.config.runtime import MODEL_DIR_ENV as MODEL_DIR_ENV
from satbench.config.runtime import EmbeddedRuntime as EmbeddedRuntime
from satbench.config.runtime import NativeRuntime as NativeRuntime
from satbench.config.runtime import RuntimeConfig as RuntimeConfig
from satbench.config.runtime import RuntimeKind as RuntimeKind
from satbench.config.runtime import UrlRuntime as UrlRuntime
from satbench.config.runtime import resolve_model_dir as resolve_model_dir
from satbench.config.runtime import runtime_class as runtime_class
from satbench.config.strict import Strict
from satbench.config.workload import CHAT_TEMPLATE_TOKENS, WorkloadConfig
from satbench.config.workload import DEFAULT_OUTPUT_TOKENS as DEFAULT_OUTPUT_TOKENS
from satbench.config.workload import DEFAULT_PROMPT_TOKENS as DEFAULT_PROMPT_TOKENS
from satbench.config.workload import LengthDistribution as LengthDistribution

DEFAULT_LEVELS = (1, 2, 4, 8)
DEFAULT_REPETITIONS = 3
DEFAULT_REQUEST_TIMEOUT_S = 300.0
DEFAULT_BATCH_TOKENS = 2048
DEFAULT_UBATCH_TOKENS = 512


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


class SloConfig(Strict):
    """A lane's latency objective: p95 TTFT and p95 TPOT, and optionally p95 E2E, in milliseconds
    (docs/definitions.md#slo)."""

    p95_ttft_ms: Milliseconds
    p95_tpot_ms: Milliseconds
    p95_e2e_ms: Milliseconds | None = Field(None, description="optional end-to-end latency target")


LANE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class LaneConfig(Strict):
    """One lane (one model on one runtime configuration) and its sweep. With `adaptive`, `levels`
    bound the adaptive sweep (its highest is the ceiling of the doubling) instead of being run
    as given."""

    # (the docstring is the lane's description in the published schemas.) What levels, repetitions,
    # adaptive and rates mean is read once into load profiles: `profile`, `open_loop` (config/profiles).

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
    runtime: RuntimeConfig = Field(default_factory=EmbeddedRuntime)
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
        """Every field acts (NEEDS); a rate's arrivals must span at most MAX_RATE_SPAN_S
        (`OpenRates.span_problem`)."""
        if recorded(info):
            return self
        for field, acts, needs in NEEDS:
            if _set(self, field) and not acts(self):
                raise NeedsError(field, needs)
        if (problem := self._open_rules().span_problem()) is not None:
            raise ValueError(problem)
        return self

    @property
    def profile(self) -> ClosedLoop:
        """The lane's closed loop, the one place it is chosen: the adaptive sweep when the lane has
        `adaptive`, else its fixed levels."""
        if self.adaptive is not None:
            return AdaptiveSweep(levels=self.levels, adaptive=self.adaptive,
                                 requests_per_level=self.requests_per_level)
        return FixedLevels(levels=self.levels, repetitions=self.repetitions,
                           requests_per_level=self.requests_per_level)

    @property
    def open_loop(self) -> OpenRates | None:
        """The lane's open-loop rates, None when it gives none."""
        return None if self.rates is None else self._open_rules()

    def _open_rules(self) -> OpenRates:
        return OpenRates(rates=self.rates or [], rate_requests=self.rate_requests,
                         max_concurrency=self.max_concurrency)

    def arrivals_per_rate(self, rate_rps: float) -> int:
        """Measured arrivals of one open-loop rate (`OpenRates.arrivals`)."""
        return self._open_rules().arrivals(rate_rps)

    def open_cap(self, slots: int) -> int:
        """Requests in flight at most in the open loop (`OpenRates.cap`)."""
        return self._open_rules().cap(slots)

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
        """Measured requests per repetition of `level` (the profile's `measured_requests`)."""
        return self.profile.measured_requests(level)

    def ceiling(self, slots: int | None) -> int:
        """The highest level the lane may run (the profile's `ceiling`): `slots` counts only on a
        running server, whose slots are its own; a server satbench starts gets the slots it asks for."""
        return self.profile.ceiling(None if self.runtime.starts_server else slots)

    def most_repetitions(self) -> int:
        """The most repetitions one level can get (the profile's `most_repetitions`)."""
        return self.profile.most_repetitions()

    def slots_wanted(self) -> int:
        """Slots to ask a server satbench starts for: the user's --parallel, else the top level."""
        return self.server.n_parallel or max(self.levels)

    def ctx_wanted(self) -> int:
        """Total context to ask for: the user's --ctx-size, else enough for every slot.

        Per-slot context is n_ctx / n_parallel unless the KV cache is unified, so each
        slot gets the longest request (`WorkloadConfig.longest_request`) + 16 tokens of margin (+
        CHAT_TEMPLATE_TOKENS with endpoint chat, for the template's own tokens), rounded up to CTX_PAD.
        """
        if self.server.n_ctx is not None:
            return self.server.n_ctx
        per_slot = self.workload.longest_request() + 16
        if self.workload.endpoint == "chat":
            per_slot += CHAT_TEMPLATE_TOKENS
        per_slot = math.ceil(per_slot / CTX_PAD) * CTX_PAD
        return per_slot * self.slots_wanted()


CTX_PAD = 256  # llama.cpp pads a slot's context up to a multiple of this


def slot_ctx_at_most(n_ctx: int, n_parallel: int, kv_unified: bool) -> int:
    """The most context one slot can get from `-c n_ctx -np n_parallel`: llama.cpp gives each slot
    ceil(n_ctx / n_parallel) (all of n_ctx when the KV cache is unified) padded up to a multiple of
    CTX_PAD, and may cap it lower (the model's training context), never higher. b11434 measured:
    -c 500 -np 3 → 256, -c 1000 -np 3 → 512."""
    per_slot = n_ctx if kv_unified else -(-n_ctx // max(1, n_parallel))
    return -(-per_slot // CTX_PAD) * CTX_PAD


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
    ("rate_requests", lambda lane: lane.open_loop is not None,
     "it acts on open-loop rates only, and no rates are given: add rates (--rate) or drop it"),
    ("max_concurrency", lambda lane: lane.open_loop is not None,
     "it acts on open-loop rates only, and no rates are given: add rates (--rate) or drop it"),
    ("workload.seed", lambda lane: _drawn(lane) or lane.open_loop is not None,
     "it draws request lengths and open-loop arrivals, but both lengths are fixed and no --rate is "
     "given: give a length as a distribution (normal:MEAN,SD, uniform:LO-HI, jsonl:PATH) or rates"),
    ("workload.chat", lambda lane: lane.open_loop is None,
     "conversations run closed loop, and open-loop rates send independent arrivals: drop the rates "
     "(--rate) or the chat workload"),
    ("workload.trace", lambda lane: lane.open_loop is not None and len(lane.open_loop.rates) == 1,
     "a trace replays as the lane's one open-loop rate, which its reader sets (--trace, or trace in a "
     "lane file): give it there"),
)
# repetitions act on fixed levels and on the together scenario's steps, which a lane cannot see: the
# lane file and the flags check them where `together` is known (cli.lanefile, cli.args)
REPETITIONS_NEED = ("it repeats fixed levels and together steps, and neither is run: the adaptive sweep "
                    "repeats each level until its CI is narrow; give fixed levels (--concurrency, "
                    "concurrency = [...]) or drop it")


def idle_repetitions(lane: LaneConfig, together: bool) -> bool:
    """Whether the lane sets repetitions that nothing in its run repeats (REPETITIONS_NEED)."""
    return not lane.profile.given_levels and not together and _set(lane, "repetitions")


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
        if self.refine and not recorded(info) and not any(lane.profile.given_levels for lane in self.lanes):
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
