"""The writer of a run directory's JSONL files (events.jsonl, server_samples.jsonl), capped at what
their readers hold.

A reader holds at most a cap of lines of each file (config.limits.MAX_EVENTS, MAX_SAMPLES): a run
that wrote more could be measured but never analyzed. So the writer stops at the cap: the record
that would pass it raises `RecordCapError`, a RunDirError, and the run stops as it does at a failed
write (new requests stop, one line on stderr, run.json's status says why). Every line written before
stays readable, so `satbench analyze` derives what the run measured. Lines of the file already there
(a resumed run) count toward the cap.

`reserve` lines of the cap are kept for the records `reserved` accepts: a level cut by the cap still
writes its end mark, so the cut level reads as failed with its reason, not as torn.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from satbench.config.schema import Strict
from satbench.errors import RunDirError
from satbench.records.rundir import open_readable, open_run_file

_COUNT_CHUNK_BYTES = 1 << 20


class RecordCapError(RunDirError):
    """A JSONL file of the run holds as many records as satbench analyzes in one run."""


def count_lines(path: Path) -> int:
    """Newline-ended lines of the regular file `path` (0 if it does not exist), read in 1 MiB chunks."""
    if not path.exists():
        return 0
    fd = open_readable(path, False)
    try:
        total = 0
        while chunk := os.read(fd, _COUNT_CHUNK_BYTES):
            total += chunk.count(b"\n")
        return total
    except OSError as exc:
        raise RunDirError(f"cannot read {path}: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)


class JsonlWriter:
    """Append-only JSONL file of a run directory, opened by its rule (satbench.records.rundir.open_run_file:
    never through a link); every line is flushed to the OS as soon as it is written. With `cap`, at most
    `cap` lines in the file, of which the last `reserve` only for records `reserved` accepts."""

    def __init__(self, path: Path, cap: int | None = None, *, reserve: int = 0,
                 reserved: Callable[[Strict], bool] = lambda record: False) -> None:
        if cap is not None and not 0 <= reserve < cap:
            raise ValueError(f"reserve {reserve} must lie in [0, cap {cap})")
        self.path = path
        self.failed = False  # a write failed (disk full, file too large, I/O error): already reported
        self.cap, self.reserve, self.reserved = cap, reserve, reserved
        self.lines = count_lines(path) if cap is not None else 0
        self._fh = open_run_file(path, "a")

    def write(self, record: Strict) -> None:
        if self.cap is not None:
            room = self.cap - (0 if self.reserved(record) else self.reserve)
            if self.lines >= room:
                raise RecordCapError(f"{self.path} holds {self.lines:,} records, the most satbench analyzes "
                                     "in one run: the run stops here, and what it measured stays analyzable "
                                     "(satbench analyze); measure the rest in another run, with fewer "
                                     "levels, repetitions or requests")
        try:
            self._fh.write(record.model_dump_json(exclude_defaults=False) + "\n")
            self._fh.flush()
        except OSError as exc:
            self.failed = True
            raise RunDirError(f"cannot write {self.path}: {exc.strerror or exc}") from exc
        self.lines += 1

    def close(self) -> None:
        """Close; closing retries the unwritten rest of a failed write, whose error was already raised."""
        try:
            self._fh.close()
        except OSError as exc:
            if not self.failed:
                raise RunDirError(f"cannot write {self.path}: {exc.strerror or exc}") from exc
