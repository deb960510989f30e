"""Progress bar on stderr while a sweep runs (rich), refreshed a few times a second only."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from satbench.records.events import RequestEvent


class RichProgress:
    def __init__(self) -> None:
        self._p = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("errors {task.fields[errors]}"), TimeElapsedColumn(), TimeRemainingColumn(),
            console=Console(stderr=True), refresh_per_second=4, transient=False,
        )
        self._task: TaskID | None = None
        self._errors = 0
        self._total = 0

    def begin(self, total_requests: int) -> None:
        self._total = total_requests

    def level(self, lane: str, scenario: str, level: int, repetition: int) -> None:
        if self._task is None:  # drawn from the first level on: a failed start leaves no bar behind
            self._p.start()
            self._task = self._p.add_task("", total=self._total, errors=0)
        if self._task is not None:
            where = f"{lane}{' (together)' if scenario == 'together' else ''}"
            self._p.update(self._task, description=f"{where} N={level} rep {repetition}")

    def request_done(self, event: RequestEvent) -> None:
        if self._task is None or event.phase == "background":
            return
        if event.error is not None:
            self._errors += 1
        self._p.update(self._task, advance=1, errors=self._errors)

    def skip(self, requests: int) -> None:
        """Stop expecting `requests` (units a server failure ruled out)."""
        self._total = max(self._total - requests, 0)
        if self._task is not None:
            self._p.update(self._task, total=self._total)

    def end(self) -> None:
        if self._task is not None:
            self._p.stop()
