"""A replayed trace (`--trace FILE`): the Mooncake JSONL format read and checked, and its arrivals.

The format: one JSON object a line (blank lines skipped), each with

- `timestamp`: when the request arrived, integer milliseconds, never less than the line before's;
- `input_length`: its prompt, integer tokens ≥ 1;
- `output_length`: the tokens it asks for (max_tokens), integer ≥ 1;
- `hash_ids`: its prompt's blocks of BLOCK_TOKENS tokens, one integer ≥ 0 each, at most
  ⌈input_length ÷ BLOCK_TOKENS⌉ of them (a prompt's blocks past its hash_ids are its own).

Other keys are ignored (the example trace's first line names it synthetic). input_length +
output_length must fit the context (the lane's per-slot context where it is known, else
MAX_CTX_TOKENS). A bad line is refused in one line naming the file, the line and the field:
"trace t.jsonl line 7: output_length: not an integer (3.5)".

The replay: request i arrives (timestamp_i − timestamp_0) ÷ speed after the first (`offsets_ns`);
the trace's rate is requests ÷ duration × speed (`rate_rps`), the figure its results are filed under
as an open-loop rate.

The prompts its prefix blocks make: workload/trace.py.
"""

from __future__ import annotations

import codecs
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from satbench.config.limits import MAX_CTX_TOKENS, MIB
from satbench.config.profiles import MAX_RATE_SPAN_S
from satbench.config.ranges import (
    MAX_OUTPUT_TOKENS,
    MAX_PROMPT_TOKENS,
    MAX_RATE_RPS,
    MAX_REQUESTS_PER_LEVEL,
    MIN_OUTPUT_TOKENS,
    MIN_PROMPT_TOKENS,
    shown,
)
from satbench.config.workload import MAX_TRACE_SPEED, TraceWorkload
from satbench.errors import UserError

BLOCK_TOKENS = 512  # a hash_ids block: this many prompt tokens (Mooncake's)
MAX_TRACE_FILE_BYTES = 256 * MIB
MAX_TRACE_REQUESTS = MAX_REQUESTS_PER_LEVEL  # a replay is one open-loop rate: at most a level's requests
MAX_TRACE_LINE_CHARS = 1 << 20  # a line longer than this is refused before JSON parses it
NS_PER_MS = 1_000_000
FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")


@dataclass(frozen=True, slots=True)
class TraceRecord:
    """One line of a trace: its arrival (ms, as recorded), prompt and output lengths (tokens) and its
    prompt's block hash ids."""

    timestamp_ms: int
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...]


@dataclass(frozen=True)
class Trace:
    """A trace file read and checked: its path as given, the sha256 of its bytes and its records in
    file order (timestamps never decreasing, at least one)."""

    path: str
    sha256: str
    records: tuple[TraceRecord, ...]

    @property
    def duration_s(self) -> float:
        """The last request's timestamp minus the first's, seconds."""
        return (self.records[-1].timestamp_ms - self.records[0].timestamp_ms) / 1000

    def config(self, speed: float = 1.0) -> TraceWorkload:
        """The trace as a lane records it (config/workload.py)."""
        return TraceWorkload(path=self.path, sha256=self.sha256, requests=len(self.records),
                             duration_s=self.duration_s, speed=speed)

    def longest(self) -> tuple[int, int]:
        """(longest input_length, longest input_length + output_length), tokens."""
        return (max(r.input_tokens for r in self.records),
                max(r.input_tokens + r.output_tokens for r in self.records))


def rate_rps(t: TraceWorkload) -> float:
    """The replay's rate, requests/s: requests ÷ duration × speed (a trace of one instant has none:
    `read_trace` refuses it)."""
    return t.requests / t.duration_s * t.speed


def offsets_ns(records: tuple[TraceRecord, ...], speed: float) -> list[int]:
    """Each request's arrival after the first's, ns: (timestamp − first timestamp) ÷ speed."""
    first = records[0].timestamp_ms
    return [round((r.timestamp_ms - first) * NS_PER_MS / speed) for r in records]


def read_trace(path: str, max_ctx_tokens: int = MAX_CTX_TOKENS) -> Trace:
    """The trace at `path` (relative to the working directory), each line checked (the module's
    rules; UserError of one line naming the line and field), with `max_ctx_tokens` the most
    input_length + output_length one request may need. A trace whose requests all arrive at one
    instant is refused: it has no duration, so no rate to file its results under."""
    data = _read(path)
    trace = Trace(path=path, sha256=hashlib.sha256(data).hexdigest(),
                  records=parse_trace(data, path, max_ctx_tokens))
    if trace.duration_s == 0:
        raise UserError(f"trace {path}: every request arrives at timestamp {trace.records[0].timestamp_ms}; "
                        "a replay needs a duration (its rate is requests ÷ duration)")
    return trace


def load_trace(t: TraceWorkload) -> Trace:
    """The trace a lane recorded, read again: UserError when its bytes changed since (sha256)."""
    data = _read(t.path)
    if hashlib.sha256(data).hexdigest() != t.sha256:
        raise UserError(f"trace {t.path}: the file changed since the run was configured (its sha256 is not "
                        f"the recorded {t.sha256}); restore it or start a new run")
    return Trace(path=t.path, sha256=t.sha256, records=parse_trace(data, t.path, MAX_CTX_TOKENS))


def _read(path: str) -> bytes:
    from satbench.records.rundir import read_regular_file

    try:
        return read_regular_file(Path(path), MAX_TRACE_FILE_BYTES, follow_links=True, error=UserError)
    except UserError as exc:
        raise UserError(f"trace {path}: {exc}") from exc


def parse_trace(data: bytes, where: str, max_ctx_tokens: int = MAX_CTX_TOKENS) -> tuple[TraceRecord, ...]:
    """The records of a trace's bytes, in order; UserError at the first bad line."""
    out: list[TraceRecord] = []
    for lineno, raw in enumerate(data.removeprefix(codecs.BOM_UTF8).split(b"\n"), 1):  # CR: JSON space
        if not raw.strip():
            continue
        at = f"trace {where} line {lineno}"
        if len(out) >= MAX_TRACE_REQUESTS:
            raise UserError(f"{at}: more than {MAX_TRACE_REQUESTS:,} requests in one trace")
        record = _record(raw, at, max_ctx_tokens)
        if out and record.timestamp_ms < out[-1].timestamp_ms:
            raise UserError(f"{at}: timestamp: {record.timestamp_ms} is before the line before's "
                            f"{out[-1].timestamp_ms} (a trace's times never decrease)")
        out.append(record)
    if not out:
        raise UserError(f"trace {where}: no requests (the file is empty)")
    return tuple(out)


def _record(raw: bytes, at: str, max_ctx_tokens: int) -> TraceRecord:
    """The record of one line (not blank), `at` naming it; UserError at its first bad field."""
    item = _object(raw, at)
    for name in FIELDS:
        if name not in item:
            raise UserError(f"{at}: {name}: missing")
    timestamp = _integer(item, "timestamp", 0, at)
    n_in = _integer(item, "input_length", 1, at, MAX_PROMPT_TOKENS)
    n_out = _integer(item, "output_length", 1, at, MAX_OUTPUT_TOKENS)
    if n_in + n_out > max_ctx_tokens:
        raise UserError(f"{at}: input_length: {n_in} + output_length {n_out} = {n_in + n_out} tokens, "
                        f"more than the context of {max_ctx_tokens}")
    return TraceRecord(timestamp, n_in, n_out, _hash_ids(item["hash_ids"], n_in, at))


def _object(raw: bytes, at: str) -> dict:
    if len(raw) > MAX_TRACE_LINE_CHARS:
        raise UserError(f"{at}: longer than {MAX_TRACE_LINE_CHARS:,} bytes")
    try:
        item = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise UserError(f"{at}: not UTF-8 text (byte {exc.start})") from None
    except (ValueError, RecursionError) as exc:
        why = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deep"
        raise UserError(f"{at}: not JSON ({why})") from None
    if not isinstance(item, dict):
        raise UserError(f"{at}: not a JSON object (got {type(item).__name__})")
    return item


def _hash_ids(hashes: object, n_in: int, at: str) -> tuple[int, ...]:
    """A line's hash_ids: integers ≥ 0, at most one per block of its `n_in` prompt tokens."""
    if not isinstance(hashes, list):
        raise UserError(f"{at}: hash_ids: not a list of integers ({shown(hashes)})")
    for k, h in enumerate(hashes):
        if type(h) is not int or h < 0:
            raise UserError(f"{at}: hash_ids: item {k} is not an integer ≥ 0 ({shown(h)})")
    blocks = -(-n_in // BLOCK_TOKENS)
    if len(hashes) > blocks:
        raise UserError(f"{at}: hash_ids: {len(hashes)} blocks, but input_length {n_in} makes at most "
                        f"{blocks} of {BLOCK_TOKENS} tokens")
    return tuple(hashes)


def _integer(item: dict, name: str, least: int, at: str, most: int | None = None) -> int:
    """`item[name]`, an integer from `least` to `most`; UserError naming the field otherwise."""
    value = item[name]
    if type(value) is not int:
        raise UserError(f"{at}: {name}: not an integer ({shown(value)})")
    if value < least:
        raise UserError(f"{at}: {name}: {'negative' if value < 0 else 'less than ' + str(least)} ({value})")
    if most is not None and value > most:
        raise UserError(f"{at}: {name}: more than {most:,} tokens ({value})")
    return value


class TraceFieldError(ValueError):
    """A trace given with what it excludes, or at a speed it cannot be replayed at: `field` is the
    LaneConfig path the complaint is about (workload.trace or workload.trace.speed)."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(message)


EXCLUDED = (("rates", "--rate"), ("rate_requests", "--rate-requests"), ("workload.prompt_tokens",
            "--prompt-tokens"), ("workload.output_tokens", "--output-tokens"),
            ("workload.shared_prefix", "--shared-prefix"), ("workload.chat", "--workload chat"))


def trace_given(given: dict, max_ctx_tokens: int = MAX_CTX_TOKENS) -> None:
    """A lane's given values (LaneConfig path → value, nested one level: given["workload"]["trace"])
    with a trace path: the trace read (`read_trace`), `workload.trace` its record at trace.speed,
    prompt_tokens its longest input and prompt + output tokens its longest request (what the context
    and memory checks bound), and its replay the lane's one open-loop rate (`rate_rps`, every line an
    arrival: rate_requests its requests). A trace gives its own lengths, prefixes and arrivals: what
    would set them (EXCLUDED) is refused with it (TraceFieldError)."""
    workload = given.get("workload", {})
    speed = workload.pop("trace.speed", None)
    if "trace" not in workload:
        if speed is not None:
            raise TraceFieldError("workload.trace.speed", "it acts on a replayed trace only: add --trace "
                                  "(trace) or drop it")
        return
    path = workload.pop("trace")
    for field, flag in EXCLUDED:
        head, _, rest = field.partition(".")
        if (workload.get(rest) if rest else given.get(head)) not in (None, False):
            raise TraceFieldError("workload.trace", f"a trace gives its own lengths, prefixes and arrivals: "
                                  f"it excludes {flag}")
    if speed is not None and not 0 < speed <= MAX_TRACE_SPEED:
        raise TraceFieldError("workload.trace.speed", f"must be above 0 and at most {MAX_TRACE_SPEED:g}, "
                              f"got {shown(speed)}")
    trace = read_trace(str(path), max_ctx_tokens)
    t, (longest_in, longest) = trace.config(1.0 if speed is None else speed), trace.longest()
    rate, span_s = rate_rps(t), t.duration_s / t.speed
    if rate > MAX_RATE_RPS or span_s > MAX_RATE_SPAN_S:
        raise TraceFieldError("workload.trace.speed", f"the trace's {t.requests:,} requests over "
                              f"{span_s:g} s would arrive at {rate:g}/s: at most {MAX_RATE_RPS:g}/s over "
                              f"at most {MAX_RATE_SPAN_S:g} s")
    workload.update(trace=t, prompt_tokens=max(longest_in, MIN_PROMPT_TOKENS),
                    output_tokens=max(longest - longest_in, MIN_OUTPUT_TOKENS))
    given.update(rates=[rate], rate_requests=t.requests)
