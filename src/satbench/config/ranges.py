"""The range of every number a user gives, flag or lane file: one checked type per kind of value.

`number_text` is the one rule of a number a user writes as text (a flag's value, an item of a list
flag, a number inside a duration or a length distribution): ASCII digits, no digit separator, no
surrounding whitespace. `IntRange` and `FloatRange` are the one rule every integer and number goes
through (a bool, a string, inf or nan is refused); the aliases below (`Level`, `Seconds`,
`PromptTokens`, ...) give each kind of value its bounds from the MAX_* caps, and `Flag` a strict
bool. A config read back from run.json or results.json is validated with RECORDED: the types and
lower bounds hold, the upper caps do not. config/schema builds the lane and run models from these types.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Annotated

import annotated_types
from pydantic import BeforeValidator, Field, ValidationInfo

from satbench.config.limits import MAX_CTX_TOKENS  # a context asked for: the bound of one a server reports

# The ranges of every number a user gives (flag or lane file); each is checked here only. A config read
# back from run.json or results.json is validated with RECORDED: the types and lower bounds hold, the
# upper caps (MAX_*) do not, so a run recorded before a cap existed (or under a larger one) stays readable.
RECORDED = {"recorded": True}
MAX_LEVEL = 4096  # concurrent streams of one level (satbench's own memory is checked besides: workload.py)
MAX_LEVELS_PER_LANE = 64
MAX_LANES = 64  # each lane's model is resolved and sha256-verified before the run
MAX_TIMEOUT_S = 86_400.0  # one day: request, read and startup timeouts
MIN_TIMEOUT_S = 0.1  # a request or read timeout below it would fail every request (and 1e-300 is no time)
MIN_BUDGET_S = 1.0  # an adaptive sweep's budget below it would end the sweep before its first level
MIN_PROMPT_TOKENS = 8
MAX_PROMPT_TOKENS = 1 << 20
MIN_OUTPUT_TOKENS = 2
MAX_OUTPUT_TOKENS = 1 << 20
MAX_REPETITIONS = 100
MAX_SEED = 2**63 - 1  # --seed: the lengths' seed (workload/lengths.py)
MAX_REQUESTS_PER_LEVEL = 100_000
MAX_RATE_RPS = 100_000.0  # an open-loop arrival rate, requests per second
MAX_WARMUP_PER_STREAM = 100
MAX_SLOTS = MAX_LEVEL
MAX_BATCH_TOKENS = 1 << 20
MAX_THREADS = 4096
MAX_GPU_LAYERS = 100_000  # "offload everything" is often written 999
MAX_PORT = 65_535
MAX_CHECK_REQUESTS = 1000  # requests per stream, client or probe of a fairness check
MAX_FACTOR = 1000.0  # the fairness checks' ratios, factors and multiples
MAX_SLO_MS = MAX_TIMEOUT_S * 1000.0
MAX_TOK_PER_S = 1e9  # a figure of throughput a report may advertise (an H200 node streams ~10^5)
MAX_BYTES = 2**60  # a figure of memory a report may advertise (an exbibyte)
_SHOWN_CHARS = 40


def shown(value: object) -> str:
    """A user's value in an error message: short, one line."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS] + "..."


def number_chars(text: str, what: str) -> None:
    """The characters a number written as text may have: ASCII only (Python's int() and float() read
    '١' and '６' as digits) and no digit separator (they read 1_0 as 10: a typo would pass). ValueError
    of one line naming `what` (a flag, a list; "": the caller names it) otherwise."""
    where = f"{what}: " if what else ""
    if "_" in text:
        raise ValueError(f"{where}digit separators (_) are not accepted, got {shown(text)}")
    if not text.isascii():
        raise ValueError(f"{where}only ASCII digits (0-9) are accepted, got {shown(text)}")


_DECIMAL = re.compile(r"[+-]?[0-9]+")


def number_text(text: str, what: str, integer: bool = False) -> int | float:
    """A number a user wrote as text, by the one rule of every number flag and list item: `number_chars`,
    no surrounding whitespace, then a decimal integer (`integer`) or what float() reads (1.5, 2e3, and
    inf or nan, which the field's range refuses by name). ValueError of one line naming `what`; the
    range is the field's (IntRange, FloatRange)."""
    number_chars(text, what)
    kind = "an integer" if integer else "a number"
    if text != text.strip() or not text:
        raise ValueError(f"{what}: expected {kind} without surrounding whitespace, got {shown(text)}")
    try:
        if integer:
            if not _DECIMAL.fullmatch(text):
                raise ValueError(text)
            return int(text)  # ValueError past Python's 4,300 digits
        return float(text)
    except ValueError:
        raise ValueError(f"{what}: expected {kind}, got {shown(text)}") from None


def recorded(info: ValidationInfo) -> bool:
    """The value being validated was recorded by an earlier run (context RECORDED): no upper caps."""
    return isinstance(info.context, dict) and info.context.get("recorded") is True


def _int_check(lo: int, hi: int) -> Callable[[object, ValidationInfo], int]:
    def check(value: object, info: ValidationInfo) -> int:
        top = math.inf if recorded(info) else hi
        if type(value) is not int or not lo <= value <= top:  # a bool or a float is not an integer
            raise ValueError(f"must be an integer from {lo:,} to {hi:,}, got {shown(value)}")
        return value
    return check


def _float_check(lo: float, hi: float, lo_open: bool) -> Callable[[object, ValidationInfo], float]:
    above = "above" if lo_open else "at least"

    def check(value: object, info: ValidationInfo) -> float:
        top = math.inf if recorded(info) else hi
        if ((type(value) is int or (type(value) is float and math.isfinite(value)))  # not a bool
                and (value > lo if lo_open else value >= lo) and value <= top):
            return float(value)
        raise ValueError(f"must be a finite number {above} {lo:g} and at most {hi:g}, got {shown(value)}")
    return check


@dataclass(frozen=True)
class IntRange(annotated_types.GroupedMetadata):
    """An integer field from `lo` to `hi` inclusive: `Annotated[int, IntRange(lo, hi)]`. A bool, a
    float or a string is refused (TOML and JSON types are strict). The one rule every integer a user
    gives goes through. Under RECORDED the cap `hi` does not apply (nor is it published in the
    schema: results.json records configs as they were recorded)."""

    lo: int
    hi: int

    def __iter__(self) -> Iterator[object]:
        yield BeforeValidator(_int_check(self.lo, self.hi))
        yield Field(ge=self.lo)


@dataclass(frozen=True)
class FloatRange(annotated_types.GroupedMetadata):
    """A finite number above `lo` (at least `lo` when not `lo_open`) and at most `hi`:
    `Annotated[float, FloatRange(lo, hi)]`. An integer is taken as a number, a bool or a string is
    not. inf and nan are refused: run.json could not hold them. Under RECORDED the cap `hi` does not
    apply (see IntRange)."""

    lo: float
    hi: float
    lo_open: bool = True

    def __iter__(self) -> Iterator[object]:
        yield BeforeValidator(_float_check(self.lo, self.hi, self.lo_open))
        yield Field(gt=self.lo) if self.lo_open else Field(ge=self.lo)


def _bool_check(value: object) -> bool:
    if type(value) is not bool:
        raise ValueError(f"must be true or false, got {shown(value)}")
    return value


Flag = Annotated[bool, BeforeValidator(_bool_check)]
Level = Annotated[int, IntRange(1, MAX_LEVEL)]
Seconds = Annotated[float, FloatRange(0.0, MAX_TIMEOUT_S)]
Timeout = Annotated[float, FloatRange(MIN_TIMEOUT_S, MAX_TIMEOUT_S, lo_open=False)]  # request, read, startup
Budget = Annotated[float, FloatRange(MIN_BUDGET_S, MAX_TIMEOUT_S, lo_open=False)]  # adaptive budget: ≥ 1 s
PromptTokens = Annotated[int, IntRange(MIN_PROMPT_TOKENS, MAX_PROMPT_TOKENS)]
OutputTokens = Annotated[int, IntRange(MIN_OUTPUT_TOKENS, MAX_OUTPUT_TOKENS)]
Repetitions = Annotated[int, IntRange(1, MAX_REPETITIONS)]
Seed = Annotated[int, IntRange(0, MAX_SEED)]
RequestsPerLevel = Annotated[int, IntRange(1, MAX_REQUESTS_PER_LEVEL)]
RateRps = Annotated[float, FloatRange(0.0, MAX_RATE_RPS)]  # an open-loop arrival rate, > 0 requests/s
Slots = Annotated[int, IntRange(1, MAX_SLOTS)]
CtxTokens = Annotated[int, IntRange(64, MAX_CTX_TOKENS)]
BatchTokens = Annotated[int, IntRange(1, MAX_BATCH_TOKENS)]
Threads = Annotated[int, IntRange(1, MAX_THREADS)]
GpuLayers = Annotated[int, IntRange(-1, MAX_GPU_LAYERS)]
Port = Annotated[int, IntRange(1, MAX_PORT)]
Milliseconds = Annotated[float, FloatRange(0.0, MAX_SLO_MS)]
CheckRequests = Annotated[int, IntRange(3, MAX_CHECK_REQUESTS)]
WarmupPerStream = Annotated[int, IntRange(0, MAX_WARMUP_PER_STREAM)]
SampleInterval = Annotated[float, FloatRange(0.0, 1.0)]
Factor = Annotated[float, FloatRange(0.0, MAX_FACTOR)]  # the fairness checks' positive factors
Ratio = Annotated[float, FloatRange(1.0, MAX_FACTOR)]  # a ratio or factor above 1
Fraction = Annotated[float, FloatRange(0.0, 1.0)]
Iterations = Annotated[float, FloatRange(0.0, MAX_FACTOR, lo_open=False)]  # decode iterations, >= 0
InjectedBatches = Annotated[float, FloatRange(1.5, MAX_FACTOR, lo_open=False)]  # S1: × n_batch tokens
CheckStreams = Annotated[int, IntRange(2, MAX_SLOTS)]  # F1: concurrent streams compared
Probes = Annotated[int, IntRange(1, MAX_CHECK_REQUESTS)]  # S2: probe requests
Rounds = Annotated[int, IntRange(1, MAX_REPETITIONS)]  # a fairness check's rounds (base or cap)
Quantile = Annotated[float, FloatRange(0.5, 0.99, lo_open=False)]  # a fairness statistic's quantile
RequestsPerStream = Annotated[int, IntRange(1, MAX_CHECK_REQUESTS)]  # adaptive: per stream and repetition
Retries = Annotated[int, IntRange(0, MAX_REPETITIONS)]
# figures a capability report advertises (checked when a fleet merge reads one back)
TokPerS = Annotated[float, FloatRange(0.0, MAX_TOK_PER_S, lo_open=False)]
LatencyMs = Annotated[float, FloatRange(0.0, MAX_SLO_MS, lo_open=False)]
ByteCount = Annotated[int, IntRange(0, MAX_BYTES)]
