"""Hand-made raw records with exact timestamps (a controllable clock for metric tests)."""

from __future__ import annotations

from satbench.records.events import (
    LevelMark,
    MetricsSample,
    RequestErrorInfo,
    RequestEvent,
    ServerTimings,
    SlotsSample,
)

MS = 1_000_000  # ns per ms


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
