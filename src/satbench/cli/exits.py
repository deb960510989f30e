"""satbench's exit codes: the one table the help epilogs, the README's list (tests/cli/test_exits.py
checks it) and the commands' return values use."""

from __future__ import annotations

from typing import NamedTuple


class ExitCode(NamedTuple):
    code: int
    meaning: str


OK = 0
INTERNAL_ERROR = 1
USAGE = 2
SERVER_START = 3
SERVER_GONE = 4
RUN_DIR = 5
FAIRNESS_FAILED = 6
VERIFY_FAILED = 7
MERGE_REFUSED = 8
FLEET_INCOMPLETE = 9
INTERRUPTED = 130

EXIT_CODES: tuple[ExitCode, ...] = (
    ExitCode(OK, "success"),
    ExitCode(INTERNAL_ERROR, "internal error: a bug in satbench (SATBENCH_TRACEBACK=1 shows where)"),
    ExitCode(USAGE, "bad input: a flag, file, path, URL or number refused before anything runs"),
    ExitCode(SERVER_START, "the inference server could not be started or reached"),
    ExitCode(SERVER_GONE, "a server died or stopped answering during the run (the rest was measured)"),
    ExitCode(RUN_DIR, "a run directory is missing, unreadable, inconsistent or unwritable"),
    ExitCode(FAIRNESS_FAILED, "a fairness or starvation check failed"),
    ExitCode(VERIFY_FAILED, "verify: the run directory does not match its SHA256SUMS or its raw files"),
    ExitCode(MERGE_REFUSED, "fleet merge: a report was refused; nothing written"),
    ExitCode(FLEET_INCOMPLETE, "fleet run: some node is not in the merged outputs"),
    ExitCode(INTERRUPTED, "interrupted (Ctrl-C or SIGTERM); what was measured stays in the run directory"),
)


def help_epilog() -> str:
    """The exit codes as the end of every command's --help."""
    return "exit codes:\n" + "\n".join(f"  {e.code:>3}  {e.meaning}" for e in EXIT_CODES)


def readme_list() -> str:
    """The exit codes as the README's Markdown table (between its `exit-codes` markers)."""
    rows = [f"| {e.code} | {e.meaning} |" for e in EXIT_CODES]
    return "\n".join(["| exit | meaning |", "|---|---|", *rows])
