"""Hand-made raw records with exact timestamps (a controllable clock for metric tests)."""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel

from satbench.records.events import (
    LevelMark,
    MetricsSample,
    RequestErrorInfo,
    RequestEvent,
    ServerTimings,
    SlotsSample,
)

MS = 1_000_000  # ns per ms
T = TypeVar("T")


def ev(
    *, stream: int = 0, seq: int = 0, sent_ms: float, chunks_ms: list[float] | None = None,
    end_ms: float | None = None, tokens_per_chunk: int = 1, phase: str = "measured", level: int = 1,
    repetition: int = 1, targeted_ms: float | None = None, prompt_ms: float | None = None,
    prompt_n: int | None = None, error: str | None = None, retries: int = 0, max_tokens: int | None = None,
) -> RequestEvent:
    chunks = [(int(t * MS), tokens_per_chunk) for t in (chunks_ms or [])]
    out = sum(n for _, n in chunks)
    timings = None
    if prompt_ms is not None or prompt_n is not None:
        timings = ServerTimings(prompt_ms=prompt_ms, prompt_n=prompt_n, cache_n=0)
    return RequestEvent(
        lane="default", level=level, repetition=repetition, stream=stream, seq=seq, phase=phase,
        request_id=f"r{level}-{repetition}-{phase}-{seq}", prompt_tokens=prompt_n or 16,
        max_tokens=max_tokens if max_tokens is not None else out,
        targeted_ns=int((targeted_ms if targeted_ms is not None else sent_ms) * MS),
        sent_ns=int(sent_ms * MS), headers_ns=int(sent_ms * MS) + 1,
        end_ns=int((end_ms if end_ms is not None else (chunks_ms[-1] if chunks_ms else sent_ms)) * MS),
        chunks=chunks, output_tokens=out, timings=timings, retries=retries,
        error=RequestErrorInfo(type=error, message="x") if error else None,
    )


def mark(kind: str, t_ms: float, level: int = 1, repetition: int = 1, status: str = "complete") -> LevelMark:
    return LevelMark(kind=kind, lane="default", level=level, repetition=repetition, t_ns=int(t_ms * MS),
                     status=status if kind == "level_end" else "running")


def slots(t_ms: float, busy: list[int], n: int = 4) -> SlotsSample:
    return SlotsSample(lane="default", sent_ns=int(t_ms * MS) - 1, t_ns=int(t_ms * MS), n_slots=n,
                       busy_ids=busy)


def metrics(t_ms: float, **values: float) -> MetricsSample:
    return MetricsSample(lane="default", sent_ns=int(t_ms * MS) - 1, t_ns=int(t_ms * MS), values=values)


class ListSink:
    """An in-memory stand-in for JsonlWriter: what was written, in order."""

    def __init__(self) -> None:
        self.records: list = []

    def write(self, record) -> None:
        self.records.append(record)

    def close(self) -> None: ...


def replaced(model: T, changes: dict[str, object]) -> T:
    """`model` (a record, or a list or dict of them) with each dotted path of `changes` (field names,
    list indexes, dict keys) set to its value: every record along a path is a `model_copy(update=...)`,
    every list or dict on it a copy, so a frozen record is never assigned and the one given is left as
    it was. Later paths see the earlier ones: {"lanes.0.levels": [...], "lanes.0.levels.1.gpu": None}."""
    out: object = model
    for path, value in changes.items():
        out = _set(out, path.split("."), value)
    return out  # type: ignore[return-value]


def _set(obj: object, parts: list[str], value: object) -> object:
    if not parts:
        return value
    key, rest = parts[0], parts[1:]
    if isinstance(obj, BaseModel):
        return obj.model_copy(update={key: _set(getattr(obj, key), rest, value)})
    if isinstance(obj, list):
        i = range(len(obj))[int(key)]  # -1: the last; IndexError beyond either end
        return [*obj[:i], _set(obj[i], rest, value), *obj[i + 1:]]
    if isinstance(obj, dict):
        k: object = key if key in obj or not key.lstrip("-").isdigit() else int(key)
        return {**obj, k: _set(obj.get(k), rest, value)}
    raise TypeError(f"cannot step into {type(obj).__name__} at {key!r}")
