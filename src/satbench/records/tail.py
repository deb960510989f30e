"""Reading a run directory's JSONL files while they are written: each line once (`JsonlTail`)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from satbench.errors import RunDirError
from satbench.records.events import MAX_RECORD_BYTES, present, validate_event, validate_sample, why_invalid
from satbench.records.rundir import open_run_file


class JsonlTail:
    """The records appended to a JSONL file of a run directory since the last `read` (a sweep that
    derives while it writes reads each line once). The file is opened by the run directory's rule
    (open_run_file: never through a link); a line still being written is left for the next read;
    a line over MAX_RECORD_BYTES or not a valid record is a RunDirError naming it."""

    def __init__(self, path: Path, samples: bool = False) -> None:
        self.path = path
        self._validate = validate_sample if samples else validate_event
        self._offset = 0
        self._lineno = 0

    def read(self) -> list:
        if not present(self.path):
            return []
        with open_run_file(self.path, "r+b") as fh:
            fh.seek(self._offset)
            data = fh.read()
        end = data.rfind(b"\n") + 1
        out = []
        for line in data[:end].splitlines():
            self._lineno += 1
            if len(line) > MAX_RECORD_BYTES:
                raise RunDirError(f"{self.path}:{self._lineno}: a line over {MAX_RECORD_BYTES} bytes")
            if not line.strip():
                continue
            try:
                out.append(self._validate(json.loads(line.decode("utf-8"))))
            except (ValueError, ValidationError, RecursionError) as exc:
                why = why_invalid(exc)
                raise RunDirError(f"{self.path}:{self._lineno}: not a valid record ({why})") from exc
        self._offset += end
        return out
