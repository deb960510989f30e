"""A level's flags: typed values (kind + detail) whose text is made in one place (`Flag.of`).

A flag's text is "<kind>: <detail>", the kind a `FlagKind`; results.json keeps the text, so a flag
is a `str` whose kind and detail are read back from it. Consumers match on `flag.kind`, never on
the text. A text of a kind this satbench does not know (a results.json from another version)
loads as kind OTHER, its text kept as it was.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema


class FlagKind(StrEnum):
    """What a flag says about its level; the value is the text's tag."""

    QUEUE_BOUND = "queue_bound"
    FEW_REQUESTS = "few_requests"
    MISSING_REPETITIONS = "missing_repetitions"
    REPETITION_RUNNING = "repetition_running"
    REPETITION_FAILED = "repetition_failed"
    REPETITION_INTERRUPTED = "repetition_interrupted"
    REPETITION_INCOMPLETE = "repetition_incomplete"
    NO_STEADY_WINDOW = "no_steady_window"
    FEW_THROUGHPUT_STREAMS = "few_throughput_streams"
    FEW_SAMPLES = "few_samples"
    FEW_OCCUPANCY_SAMPLES = "few_occupancy_samples"
    LITTLES_LAW_MISMATCH = "littles_law_mismatch"
    ERRORS = "errors"
    CANCELLED = "cancelled"
    RETRIES = "retries"
    CPU_CONTENTION = "cpu_contention"
    CONTENDED = "contended"
    CONTENDED_REPETITIONS_EXCLUDED = "contended_repetitions_excluded"
    TOKEN_COUNT_APPROXIMATE = "token_count_approximate"
    TOKEN_TIMING_APPROXIMATE = "token_timing_approximate"
    OTHER = ""  # a tag this satbench does not know


_BY_TAG = {k.value: k for k in FlagKind if k is not FlagKind.OTHER}
_SEP = ": "


class Flag(str):
    """One flag of a level: its text "<kind>: <detail>" (`Flag.of`), its `kind` and `detail`."""

    @classmethod
    def of(cls, kind: FlagKind, detail: str) -> Flag:
        """The flag of `kind` saying `detail`: the one place a flag's text is made."""
        return cls(f"{kind.value}{_SEP}{detail}")

    @classmethod
    def repetition(cls, status: str, detail: str) -> Flag:
        """A repetition that did not complete: its kind from its status ("failed" → REPETITION_FAILED)."""
        return cls(f"repetition_{status}{_SEP}{detail}")

    @property
    def kind(self) -> FlagKind:
        tag, sep, _ = self.partition(_SEP)
        return _BY_TAG.get(tag, FlagKind.OTHER) if sep else FlagKind.OTHER

    @property
    def tag(self) -> str:
        """The kind's name as the text writes it; for kind OTHER the text up to its first colon."""
        kind = self.kind
        return kind.value if kind is not FlagKind.OTHER else self.split(":")[0]

    @property
    def detail(self) -> str:
        """The text after the kind; the whole text for kind OTHER."""
        return self if self.kind is FlagKind.OTHER else self.partition(_SEP)[2]

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler
                                     ) -> core_schema.CoreSchema:
        """A string on disk and in the JSON Schema; a Flag once validated."""
        text = core_schema.str_schema()
        return core_schema.no_info_after_validator_function(
            cls, text,
            serialization=core_schema.plain_serializer_function_ser_schema(str, return_schema=text))


def has_flag(flags: list[Flag], kind: FlagKind) -> bool:
    """Whether any of `flags` is of `kind`."""
    return any(f.kind is kind for f in flags)


# what results.json `definitions` says of these kinds (under the kind's tag)
FLAG_DEFINITIONS: dict[FlagKind, str] = {
    FlagKind.FEW_THROUGHPUT_STREAMS: "flagged when a repetition's rates rest on fewer than N streams (a "
                                     "stream with no measured request running in the window is left out and "
                                     "the rest scaled to N)",
    FlagKind.CPU_CONTENTION: "flagged when the host was >= 90% busy (server, load generator and neighbours "
                             "competed; for a server on another machine, the load generator and neighbours) "
                             "or other processes used >= 0.25 core while less than 1 core stayed idle, or "
                             ">= 1 core (not judged when the server's own CPU is not read: a url lane)",
    FlagKind.CONTENDED: "a repetition during which other processes used >= 0.25 core while less than 1 core "
                        "stayed idle, or >= 1 core, or the host was >= 90% busy and others used >= 0.1 core "
                        "(server on this machine, its CPU read); for a server elsewhere, the host >= 90% "
                        "busy. Contended repetitions are left out of a level's figures while >= 2 clean "
                        "ones remain; else the level is contended and the knee rule does not use it",
    FlagKind.FEW_OCCUPANCY_SAMPLES: "flagged when a window's time-weighted busy slots rests on fewer than "
                                    "10 good /slots (or requests_processing) readings, or one reading "
                                    "stands for more than 25% of the window",
}


def flag_definitions() -> dict[str, str]:
    """The flags' entries of results.json `definitions`."""
    return {kind.value: text for kind, text in FLAG_DEFINITIONS.items()}
