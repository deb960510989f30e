"""Raw records (docs/run-directory.md): what happened, stamped with the monotonic clock, nothing derived.

Every record names its lane and scenario (solo, or together with the run's other lanes);
`background` requests keep a lane busy in the together scenario while another lane is still
measuring, and never count toward any metric.

Two append-only JSONL files hold them:
- `events.jsonl`: one `RequestEvent` per finished request (warmup and measured, errors
  included) and `LevelMark` lines at the start and end of every level repetition;
- `server_samples.jsonl`: `MetricsSample`, `SlotsSample` and `ProcessSample` lines.

Lines are written and flushed as they happen, so a crash loses at most what was in flight.
All `*_ns` stamps come from `time.perf_counter_ns()` (CLOCK_MONOTONIC on Linux).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    Field,
    TypeAdapter,
    ValidationError,
    ValidatorFunctionWrapHandler,
    field_serializer,
    field_validator,
    model_validator,
)

from satbench.config.limits import MAX_CTX_TOKENS, MAX_EVENTS, MAX_METRIC_VALUE, MAX_SERVER_MS, MAX_SLOTS
from satbench.config.ranges import FloatRange, IntRange
from satbench.errors import RunDirError
from satbench.records.compact import Chunks, compact, intern_names
from satbench.records.record import Record
from satbench.records.rundir import iter_lines, read_tail

EVENTS_FILE = "events.jsonl"
SAMPLES_FILE = "server_samples.jsonl"

# The ranges a record read back must hold (a line out of range is a RunDirError naming file and line).
MAX_RECORD_BYTES = 32 << 20
"""One JSONL line: a request of 1 Mi output tokens (config.MAX_OUTPUT_TOKENS) holds 1 Mi chunk
pairs of ~25 characters each; anything longer was not written by satbench."""
MAX_RECORDED_LEVEL = 1 << 20  # streams of a level as recorded (the fairness checks run slots + clients)
MAX_COUNT = 1 << 30  # repetitions, sessions, retries, requests of a level mark
MAX_NS = 2**63 - 1  # a perf_counter_ns stamp: int64 nanoseconds (signed: only differences carry meaning)
MAX_PID = 2**31 - 1
MAX_SECONDS = 1e15  # CPU seconds (cumulative, all cores): beyond any uptime
NsStamp = Annotated[int, IntRange(-MAX_NS - 1, MAX_NS)]
RecordedLevel = Annotated[int, IntRange(1, MAX_RECORDED_LEVEL)]
Count = Annotated[int, IntRange(0, MAX_COUNT)]
TokenCount = Annotated[int, IntRange(0, MAX_CTX_TOKENS)]
ServerMs = Annotated[float, FloatRange(0.0, MAX_SERVER_MS, lo_open=False)]
SlotId = Annotated[int, IntRange(0, MAX_SLOTS)]
SlotKey = Annotated[int, Field(ge=0, le=MAX_SLOTS)]  # a JSON object key: the text of an integer
Bytes = Annotated[int, IntRange(0, MAX_NS)]
Pid = Annotated[int, IntRange(0, MAX_PID)]
CpuSeconds = Annotated[float, FloatRange(0.0, MAX_SECONDS, lo_open=False)]
MetricValue = Annotated[float, FloatRange(-MAX_METRIC_VALUE, MAX_METRIC_VALUE, lo_open=False)]
HttpStatus = Annotated[int, IntRange(0, 999)]
Percent = Annotated[float, FloatRange(0.0, 100.0, lo_open=False)]
ClockMhz = Annotated[float, FloatRange(0.0, 1e6, lo_open=False)]

def _bounds(alias: object) -> tuple[int, int]:
    """(lo, hi) of an `Annotated[int, IntRange(lo, hi)]` alias."""
    rng = next(m for m in get_args(alias)[1:] if isinstance(m, IntRange))
    return rng.lo, rng.hi


_STAMP_LO, _STAMP_HI = _bounds(NsStamp)
_TOKENS_LO, _TOKENS_HI = _bounds(TokenCount)


def _tuple_pairs(value: object) -> bool:
    """Whether `value` is a list of `(t_ns, tokens)` tuples of two integers (not bools) in the ranges
    of NsStamp and TokenCount, as the load generator builds a request's chunks."""
    if type(value) is not list:
        return False
    lo, hi, least, most = _STAMP_LO, _STAMP_HI, _TOKENS_LO, _TOKENS_HI
    for pair in value:
        if type(pair) is not tuple or len(pair) != 2:
            return False
        t, n = pair
        if type(t) is not int or type(n) is not int or not lo <= t <= hi or not least <= n <= most:
            return False
    return True


# "solo": the lane alone on the machine; "together": every lane of the run at once;
# "fairness": the workloads of the fairness and starvation checks (each request names its check and role);
# "open": the lane's open-loop rates (load/open_loop.py), its level the rate's 1-based position in `rates`
Scenario = Literal["solo", "together", "fairness", "open"]
Phase = Literal["warmup", "measured", "background"]  # a request's part of its level
LevelStatus = Literal["running", "complete", "failed", "interrupted"]  # how a level repetition ended


class ServerTimings(Record):
    """The server's own `timings` from the final stream event (llama.cpp only)."""

    cache_n: TokenCount | None = None
    prompt_n: TokenCount | None = None
    prompt_ms: ServerMs | None = None
    predicted_n: TokenCount | None = None
    predicted_ms: ServerMs | None = None


# error type of a request in flight when its level was stopped: not the server's failure
CANCELLED = "cancelled"
STOPPED = "stopped polling after"  # starts the error of the last sample a poller writes before it gives up
# starts the error of a process sample that records a failed GPU reading (no other figure)
GPU_FAILED = "NVML: "
NS_PER_MS = 1_000_000.0


class RequestErrorInfo(Record):
    """Why a request failed: a stable `type` for grouping and the original message."""

    type: str
    message: str
    http_status: HttpStatus | None = None


class RequestEvent(Record):
    """One request, from intent to last byte. `chunks` holds [t_ns, tokens_in_chunk] pairs.
    Stamps are ordered: sent_ns <= headers_ns (when the head came) <= end_ns."""

    kind: Literal["request"] = "request"
    lane: str
    scenario: Scenario = "solo"
    level: RecordedLevel
    repetition: Count
    stream: Count
    seq: Count
    phase: Phase
    request_id: str
    prompt_tokens: TokenCount = Field(description="prompt length the workload asked for")
    server_prompt_tokens: TokenCount | None = Field(
        None, description="prompt tokens as the server counted them (OpenAI usage.prompt_tokens or "
        "llama.cpp tokens_evaluated); None when it did not say")
    max_tokens: TokenCount
    targeted_ns: NsStamp
    sent_ns: NsStamp
    headers_ns: NsStamp | None = None
    end_ns: NsStamp
    chunks: list[tuple[NsStamp, TokenCount]] = Field(default_factory=list)
    output_tokens: TokenCount = 0
    token_count_exact: bool = True
    http_status: HttpStatus | None = None
    slot_id: SlotId | None = None
    timings: ServerTimings | None = None
    retries: Count = 0
    retry_reasons: list[str] = Field(default_factory=list, description="why each retried attempt failed "
                                     "(a connection dropped before any byte); its time is in sent_ns − "
                                     "targeted_ns")
    error: RequestErrorInfo | None = None
    check: str | None = Field(None, description="fairness scenario: the check this request belongs to")
    session: Count = Field(0, description="0 = the run's first session; n = its n-th --resume")
    role: str | None = Field(None, description="fairness scenario: its part in the check (decoder, probe, "
                                               "solo, …)")
    conversation: Count | None = Field(None, description="chat workload: the conversation's number in its "
                                       "level repetition and phase (None: not a conversation)")
    turn: Count | None = Field(None, description="chat workload: the turn's 1-based number in its "
                               "conversation; turn k > 1 resends turns 1..k − 1")

    @model_validator(mode="after")
    def _ordered(self) -> RequestEvent:
        if self.sent_ns > self.end_ns:
            raise ValueError(f"end_ns {self.end_ns} is before sent_ns {self.sent_ns}")
        if self.headers_ns is not None and not self.sent_ns <= self.headers_ns <= self.end_ns:
            raise ValueError(f"headers_ns {self.headers_ns} is outside sent_ns..end_ns")
        return self

    @field_validator("chunks", mode="wrap")
    @classmethod
    def _pairs_in_one_pass(cls, value: object, handler: ValidatorFunctionWrapHandler) -> object:
        """Chunks as the load generator builds them (`_tuple_pairs`) are checked in one pass and held
        as a new list, ~10x cheaper than the type's validator per number on a 128-chunk answer; a
        request read back gives its pairs as a `Chunks` (records.compact), its tokens checked; anything
        else is validated by the field's type (which names what is wrong). Same values either way."""
        if type(value) is Chunks and value.tokens_within(_TOKENS_LO, _TOKENS_HI):
            return value
        return list(value) if _tuple_pairs(value) else handler(value)  # type: ignore[call-overload]

    @field_serializer("chunks")
    def _pairs(self, chunks: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
        """As a list: a request read back holds its chunks compactly (records.compact.Chunks)."""
        return chunks if type(chunks) is list else list(chunks)

    @property
    def ok(self) -> bool:
        return self.error is None


class LevelMark(Record):
    """Start or end of one repetition of one level, as the load generator saw it."""

    kind: Literal["level_start", "level_end"]
    lane: str
    scenario: Scenario = "solo"
    level: RecordedLevel
    repetition: Count
    t_ns: NsStamp
    n_requests: Count = 0
    status: LevelStatus = "running"
    reason: str | None = None
    session: Count = 0


class MetricsSample(Record):
    """One scrape of `/metrics`: every `llamacpp:*` sample, name without the prefix."""

    kind: Literal["metrics"] = "metrics"
    lane: str
    scenario: Scenario = "solo"
    sent_ns: NsStamp
    t_ns: NsStamp
    values: dict[str, MetricValue] = Field(default_factory=dict)
    error: str | None = None


class SlotsSample(Record):
    """One read of `/slots`: which slots were processing and how far each was."""

    kind: Literal["slots"] = "slots"
    lane: str
    scenario: Scenario = "solo"
    sent_ns: NsStamp
    t_ns: NsStamp
    n_slots: SlotId = 0
    busy_ids: list[SlotId] = Field(default_factory=list)
    n_decoded: dict[SlotKey, TokenCount] = Field(default_factory=dict)
    error: str | None = None


class ProcessSample(Record):
    """Server process resources: RSS (with children), CPU seconds; GPU memory, utilisation and SM
    clock where NVML sees a GPU (device-wide figures, see gpu.py)."""

    kind: Literal["process"] = "process"
    lane: str
    scenario: Scenario = "solo"
    t_ns: NsStamp
    rss_bytes: Bytes | None = None
    cpu_seconds: CpuSeconds | None = None
    gpu_mem_used_bytes: Bytes | None = None
    gpu_util_pct: Percent | None = Field(
        None, description="NVML utilisation of the busiest GPU, percent")
    gpu_sm_clock_mhz: ClockMhz | None = Field(
        None, description="NVML SM clock of the busiest GPU, MHz")
    host_busy_cpu_seconds: CpuSeconds | None = Field(
        None, description="whole machine: CPU seconds not idle (all cores), cumulative since boot")
    client_cpu_seconds: CpuSeconds | None = Field(None, description="the satbench process itself, cumulative")
    server_pid: Pid | None = Field(None, description="the server process read (None: not started by "
                                   "satbench); a level's figures come only from the process that ran it")
    client_pid: Pid | None = Field(None, description="the satbench process that took the sample "
                                   "(one per session)")
    error: str | None = None


EventLine = Annotated[RequestEvent | LevelMark, Field(discriminator="kind")]
SampleLine = Annotated[MetricsSample | SlotsSample | ProcessSample, Field(discriminator="kind")]
_EVENT_ADAPTER: TypeAdapter[RequestEvent | LevelMark] = TypeAdapter(EventLine)
_SAMPLE_ADAPTER: TypeAdapter[MetricsSample | SlotsSample | ProcessSample] = TypeAdapter(SampleLine)
validate_sample = _SAMPLE_ADAPTER.validate_python  # one server_samples.jsonl record from its JSON value


def why_invalid(exc: Exception) -> str:
    """The first failure of a record, one short line: the field and pydantic's message."""
    if isinstance(exc, ValidationError):
        from satbench.records.manifest import first_error

        return first_error(exc)
    return exc.__class__.__name__


def _plain_chunks(value: object) -> list[tuple[int, int]] | None:
    """`value` as `RequestEvent.chunks` holds it when it is a list of [stamp, tokens] pairs of
    integers (not bools) in the ranges of NsStamp and TokenCount, as satbench writes them; None for
    anything else, which the model then validates (and names what is wrong). The same rule as the
    field's, checked in one pass instead of one validator call per number: most of a read's cost."""
    if type(value) is not list:
        return None
    try:
        pairs = [(t, n) for t, n in value
                 if type(t) is int and type(n) is int
                 and _STAMP_LO <= t <= _STAMP_HI and _TOKENS_LO <= n <= _TOKENS_HI]
    except (TypeError, ValueError):  # an item that is not a pair
        return None
    return pairs if len(pairs) == len(value) else None


def validate_event(data: object) -> RequestEvent | LevelMark:
    """One events.jsonl record from its JSON value: a request's chunks are checked in bulk
    (`_plain_chunks`), everything else by the model, which gives the same event as validating all;
    held small (records.compact)."""
    if type(data) is dict:
        intern_names(data)
        if data.get("kind") == "request" and (pairs := _plain_chunks(data.get("chunks"))) is not None:
            event = _EVENT_ADAPTER.validate_python({**data, "chunks": Chunks(pairs)})
            compact(event)
            return event
    record = _EVENT_ADAPTER.validate_python(data)
    compact(record)
    return record


def read_jsonl(path: Path, validate: Callable[[object], Any], cap: int | None = None,
               what: str = "records") -> Iterator:
    """The records of a JSONL file, each line at most MAX_RECORD_BYTES and in the ranges of its
    model (`validate`: the record from the line's JSON value, ValidationError when it is not one);
    RunDirError naming the file and line otherwise (see satbench.records.rundir.iter_lines). With
    `cap`, a line after the cap-th record is a RunDirError naming the cap (`what` the records are),
    before it is parsed: nothing after it is read."""
    if not present(path):
        raise RunDirError(f"{path} is missing")
    count = 0
    for lineno, line in iter_lines(path, MAX_RECORD_BYTES):
        if not line.strip():
            continue
        if cap is not None and count >= cap:
            raise RunDirError(f"{path}: more than {cap:,} {what}, the most satbench reads of one run "
                              "(split the measurement into several runs)")
        try:
            record = validate(json.loads(line.decode("utf-8")))
        except (ValueError, ValidationError, RecursionError) as exc:  # not UTF-8, not JSON, too deep
            if not line.endswith(b"\n"):
                return  # a last line cut short by a crash: everything before it stands
            raise RunDirError(f"{path}:{lineno}: not a valid record ({why_invalid(exc)})") from exc
        count += 1
        yield record


def check_not_cut(path: Path) -> None:
    """RunDirError when the file's last line has no end: for a run that ended (status complete), no
    crash can explain it, so the file was cut after the run and a reader would silently drop what
    followed the cut. A missing or empty file is not cut."""
    if present(path) and (tail := read_tail(path, 1))[0] and tail[1] != b"\n":
        raise RunDirError(f"{path}: its last line has no end although the run is complete, so the file "
                          "was cut after the run; restore it (satbench verify compares it with SHA256SUMS)")


def present(path: Path) -> bool:
    """Whether `path` names something (a link included: reading it is what refuses it)."""
    try:
        return os.path.lexists(path)
    except (OSError, ValueError) as exc:
        raise RunDirError(f"cannot read {path}: {exc}") from exc


def read_events(run_dir: Path, cap: int = MAX_EVENTS) -> list[RequestEvent | LevelMark]:
    """Every line of events.jsonl, in file order (a torn last line is ignored), held small
    (records.compact); RunDirError at a line after the `cap`-th record, without reading the rest."""
    return list(read_jsonl(run_dir / EVENTS_FILE, validate_event, cap))


def read_samples(run_dir: Path) -> list[MetricsSample | SlotsSample | ProcessSample]:
    """Every line of server_samples.jsonl as a record, in file order (missing file = no samples). Each
    record takes 1.5-3 KB: analysis reads the file as columns instead (records.samples)."""
    if not present(run_dir / SAMPLES_FILE):
        return []
    return list(read_jsonl(run_dir / SAMPLES_FILE, validate_sample))


def _unit_of(r: RequestEvent | LevelMark) -> tuple[str, str, int, int]:
    if r.scenario == "fairness":
        return (r.lane, "fairness", 0, 0)
    return (r.lane, r.scenario, r.level, r.repetition)


def current_session_records(records: Sequence[RequestEvent | LevelMark]) -> list[RequestEvent | LevelMark]:
    """Per unit, only the records of the latest session that ran it (a resumed unit's cut-short
    first attempt stays on disk but does not count)."""
    latest: dict[tuple, int] = {}
    for r in records:
        key = _unit_of(r)
        latest[key] = max(latest.get(key, 0), r.session)
    return [r for r in records if r.session == latest[_unit_of(r)]]


def itl_ms(ev: RequestEvent) -> list[float]:
    """ITL per gap = (t_k − t_{k−1}) ÷ tokens in chunk k, over consecutive token-carrying chunks."""
    gaps: list[float] = []
    prev: int | None = None
    for t_ns, n in ev.chunks:
        if n <= 0:
            continue
        if prev is not None:
            gaps.append((t_ns - prev) / NS_PER_MS / n)
        prev = t_ns
    return gaps
