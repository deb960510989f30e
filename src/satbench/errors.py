"""One error hierarchy; third-party exceptions are translated into it at the edges.

The CLI prints ``str(error)`` on one line and exits with ``error.exit_code``.
"""


class SatbenchError(Exception):
    """Base of every error satbench raises on purpose."""

    exit_code = 1


class UserError(SatbenchError):
    """Bad input from the user: flags, files, paths, URLs."""

    exit_code = 2


class ModelError(UserError):
    """A model file is missing, unreadable, not GGUF, or fails its checksum."""


class RuntimeStartError(SatbenchError):
    """The inference server could not be started or reached."""

    exit_code = 3


class ServerGoneError(SatbenchError):
    """The inference server died, stopped answering, or failed every request of a level during a run."""

    exit_code = 4


class LevelFailedError(ServerGoneError):
    """One level (or fairness check) lost its server; says which, so the sweep can record it and
    go on with the rest of the run."""

    def __init__(self, message: str, *, lane: str, scenario: str, level: int, repetition: int) -> None:
        super().__init__(message)
        self.lane, self.scenario, self.level, self.repetition = lane, scenario, level, repetition


class ParseError(SatbenchError):
    """A server answer (SSE stream, /metrics, /slots, /props) could not be parsed."""


class RunDirError(SatbenchError):
    """A run directory is missing, unreadable, inconsistent or unwritable."""

    exit_code = 5


class Interrupted(SatbenchError):
    """The user stopped the run (Ctrl-C); what was measured stays valid and analyzable."""

    exit_code = 130
