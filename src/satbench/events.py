"""Raw records (DESIGN.md §3): what happened, stamped with the monotonic clock, nothing derived.

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
from pathlib import Path
from typing import Annotated, Iterator, Literal, Union

from pydantic import Field, TypeAdapter, ValidationError

from satbench.config import Strict
from satbench.errors import RunDirError
from satbench.rundir import open_run_file

EVENTS_FILE = "events.jsonl"
SAMPLES_FILE = "server_samples.jsonl"

# "solo": the lane alone on the machine; "together": every lane of the run at once;
# "fairness": the workloads of the fairness and starvation checks (each request names its check and role)
Scenario = Literal["solo", "together", "fairness"]


class ServerTimings(Strict):
    """The server's own `timings` from the final stream event (llama.cpp only)."""

    cache_n: int | None = None
    prompt_n: int | None = None
    prompt_ms: float | None = None
    predicted_n: int | None = None
    predicted_ms: float | None = None


CANCELLED = "cancelled"  # error type of a request in flight when its level was stopped: not the server's failure


class RequestErrorInfo(Strict):
    """Why a request failed: a stable `type` for grouping and the original message."""

    type: str
    message: str
    http_status: int | None = None


class RequestEvent(Strict):
    """One request, from intent to last byte. `chunks` holds [t_ns, tokens_in_chunk] pairs."""

    kind: Literal["request"] = "request"
    lane: str
    scenario: Scenario = "solo"
    level: int
    repetition: int
    stream: int
    seq: int
    phase: Literal["warmup", "measured", "background"]
    request_id: str
    prompt_tokens: int = Field(description="prompt length the workload asked for")
    server_prompt_tokens: int | None = Field(
        None, description="prompt tokens as the server counted them (OpenAI usage.prompt_tokens or "
        "llama.cpp tokens_evaluated); None when it did not say")
    max_tokens: int
    targeted_ns: int
    sent_ns: int
    headers_ns: int | None = None
    end_ns: int
    chunks: list[tuple[int, int]] = Field(default_factory=list)
    output_tokens: int = 0
    token_count_exact: bool = True
    http_status: int | None = None
    slot_id: int | None = None
    timings: ServerTimings | None = None
    retries: int = 0
    retry_reasons: list[str] = Field(default_factory=list, description="why each retried attempt failed "
                                     "(a connection dropped before any byte); its time is in sent_ns − targeted_ns")
    error: RequestErrorInfo | None = None
    check: str | None = Field(None, description="fairness scenario: the check this request belongs to")
    session: int = Field(0, description="0 = the run's first session; n = its n-th --resume")
    role: str | None = Field(None, description="fairness scenario: its part in the check (decoder, probe, solo, …)")

    @property
    def ok(self) -> bool:
        return self.error is None


class LevelMark(Strict):
    """Start or end of one repetition of one level, as the load generator saw it."""

    kind: Literal["level_start", "level_end"]
    lane: str
    scenario: Scenario = "solo"
    level: int
    repetition: int
    t_ns: int
    n_requests: int = 0
    status: Literal["running", "complete", "failed", "interrupted"] = "running"
    reason: str | None = None
    session: int = 0


class MetricsSample(Strict):
    """One scrape of `/metrics`: every `llamacpp:*` sample, name without the prefix."""

    kind: Literal["metrics"] = "metrics"
    lane: str
    scenario: Scenario = "solo"
    sent_ns: int
    t_ns: int
    values: dict[str, float] = Field(default_factory=dict)
    error: str | None = None


class SlotsSample(Strict):
    """One read of `/slots`: which slots were processing and how far each was."""

    kind: Literal["slots"] = "slots"
    lane: str
    scenario: Scenario = "solo"
    sent_ns: int
    t_ns: int
    n_slots: int = 0
    busy_ids: list[int] = Field(default_factory=list)
    n_decoded: dict[int, int] = Field(default_factory=dict)
    error: str | None = None


class ProcessSample(Strict):
    """Server process resources: RSS (with children), CPU seconds; GPU memory, utilisation and SM
    clock where NVML sees a GPU (device-wide figures, see gpu.py)."""

    kind: Literal["process"] = "process"
    lane: str
    scenario: Scenario = "solo"
    t_ns: int
    rss_bytes: int | None = None
    cpu_seconds: float | None = None
    gpu_mem_used_bytes: int | None = None
    gpu_util_pct: float | None = Field(None, description="NVML utilisation of the busiest GPU, percent")
    gpu_sm_clock_mhz: float | None = Field(None, description="NVML SM clock of the busiest GPU, MHz")
    host_busy_cpu_seconds: float | None = Field(
        None, description="whole machine: CPU seconds not idle (all cores), cumulative since boot")
    client_cpu_seconds: float | None = Field(None, description="the satbench process itself, cumulative")
    server_pid: int | None = Field(None, description="the server process read (None: not started by satbench); "
                                   "a level's figures come only from the process that ran it")
    client_pid: int | None = Field(None, description="the satbench process that took the sample (one per session)")
    error: str | None = None


EventLine = Annotated[Union[RequestEvent, LevelMark], Field(discriminator="kind")]
SampleLine = Annotated[Union[MetricsSample, SlotsSample, ProcessSample], Field(discriminator="kind")]
_EVENT_ADAPTER: TypeAdapter[RequestEvent | LevelMark] = TypeAdapter(EventLine)
_SAMPLE_ADAPTER: TypeAdapter[MetricsSample | SlotsSample | ProcessSample] = TypeAdapter(SampleLine)


class JsonlWriter:
    """Append-only JSONL file of a run directory, opened by its rule (satbench.rundir.open_run_file:
    never through a link); every line is flushed to the OS as soon as it is written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.failed = False  # a write failed (disk full, file too large, I/O error): already reported
        self._fh = open_run_file(path, "a")

    def write(self, record: Strict) -> None:
        try:
            self._fh.write(record.model_dump_json(exclude_defaults=False) + "\n")
            self._fh.flush()
        except OSError as exc:
            self.failed = True
            raise RunDirError(f"cannot write {self.path}: {exc.strerror or exc}") from exc

    def close(self) -> None:
        """Close; closing retries the unwritten rest of a failed write, whose error was already raised."""
        try:
            self._fh.close()
        except OSError as exc:
            if not self.failed:
                raise RunDirError(f"cannot write {self.path}: {exc.strerror or exc}") from exc


def _read_jsonl(path: Path, adapter: TypeAdapter) -> Iterator:
    if not path.exists():
        raise RunDirError(f"{path} is missing")
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise RunDirError(f"cannot read {path}: {exc.strerror or exc}") from exc
    with fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                record = adapter.validate_python(json.loads(line.decode("utf-8")))
            except (ValueError, ValidationError, RecursionError) as exc:  # not UTF-8, not JSON, too deep
                if not line.endswith(b"\n"):
                    return  # a last line cut short by a crash: everything before it stands
                raise RunDirError(f"{path}:{lineno}: not a valid record ({exc.__class__.__name__})") from exc
            yield record


def read_events(run_dir: Path) -> list[RequestEvent | LevelMark]:
    """Every line of events.jsonl, in file order (a torn last line is ignored)."""
    return list(_read_jsonl(run_dir / EVENTS_FILE, _EVENT_ADAPTER))


def read_samples(run_dir: Path) -> list[MetricsSample | SlotsSample | ProcessSample]:
    """Every line of server_samples.jsonl, in file order (missing file = no samples)."""
    if not (run_dir / SAMPLES_FILE).exists():
        return []
    return list(_read_jsonl(run_dir / SAMPLES_FILE, _SAMPLE_ADAPTER))
