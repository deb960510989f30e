"""Find llama.cpp's own reason for a failed start in its log (it is nowhere else)."""

from __future__ import annotations

import re
from pathlib import Path

_ASSERT = re.compile(r"GGML_ASSERT|GGML_ABORT|terminate called|Segmentation fault|Aborted")
_ERROR = re.compile(r"(^|\s)E\s|error|failed|cannot|could not|unable|invalid|not found|no such|"
                    r"unrecognized|unknown (option|argument)|^usage:", re.IGNORECASE)
_GENERIC = re.compile(r"failed to (init|load) (server|model)|exiting due to|main: exiting",
                      re.IGNORECASE)
_STAMP = re.compile(r"^\d+\.\d+\.\d+\.\d+\s+[A-Z]\s+")


def failure_reason(log_text: str) -> str | None:
    """The most specific error line: an assert first, else the first error that is not generic."""
    lines = [ln.strip() for ln in log_text.splitlines() if ln.strip()]
    for ln in lines:
        if _ASSERT.search(ln):
            return _clean(ln)
    errors = [ln for ln in lines if _ERROR.search(ln)]
    specific = [ln for ln in errors if not _GENERIC.search(ln)]
    if specific:
        return _clean(specific[0])
    if errors:
        return _clean(errors[-1])
    # no error line: e.g. killed by a signal
    return f"no error in its log; last line: {_clean(lines[-1])}" if lines else None


def failure_reason_from_file(path: Path | None) -> str | None:
    if path is None or not path.exists():
        return None
    return failure_reason(path.read_text(encoding="utf-8", errors="replace")[-200_000:])


def _clean(line: str) -> str:
    return _STAMP.sub("", line)[:400]
