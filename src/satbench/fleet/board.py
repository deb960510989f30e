"""The live progress of a fleet run: one Ray actor (`Board`) that every node's sweep tells its lane,
level and requests done (`BoardProgress`, a run.lane_session.Progress), and that the driver reads to
draw one row per node (`progress_table`)."""

from __future__ import annotations

import time
from typing import Any

from rich.table import Table

from satbench.records.events import RequestEvent

PUSH_EVERY_S = 0.5  # request counts are pushed at most this often; a new level at once


class Board:
    """node → its latest fields (state, lane, level, repetition, done, total, errors, at)."""

    def __init__(self) -> None:
        self.state: dict[str, dict[str, Any]] = {}

    def update(self, node: str, fields: dict[str, Any]) -> None:
        self.state.setdefault(node, {}).update(fields, at=time.time())

    def snapshot(self) -> dict[str, dict[str, Any]]:
        return {k: dict(v) for k, v in self.state.items()}


def start_board() -> Any:
    """The Board actor (no CPU held), on the driver's own node when it has one: a node lost mid-run
    must not take the progress view with it."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    actor = ray.remote(num_cpus=0, max_restarts=0)(Board)
    try:
        here = ray.get_runtime_context().get_node_id()
    except Exception:  # a ray:// client has no node of its own
        here = None
    if here:
        actor = actor.options(scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False))
    return actor.remote()


def board_snapshot(board: Any, last: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The Board's state now; `last` when it cannot answer (the view is progress, never the run's
    outcome: a lost actor must not end the fleet run)."""
    import ray

    try:
        return ray.get(board.snapshot.remote(), timeout=5.0)
    except (ray.exceptions.RayError, TimeoutError):
        return last


class BoardProgress:
    """A sweep's Progress that tells the Board, fire-and-forget (a lost update only delays the view)."""

    def __init__(self, board: Any, node: str) -> None:
        self.board, self.node = board, node
        self.done = self.errors = self.total = 0
        self._pushed = 0.0

    def _push(self, **fields: Any) -> None:
        self._pushed = time.monotonic()
        self.board.update.remote(self.node, {"done": self.done, "errors": self.errors, "total": self.total,
                                             **fields})

    def begin(self, total_requests: int) -> None:
        self.total = total_requests
        self._push(state="running")

    def level(self, lane: str, scenario: str, level: int, repetition: int) -> None:
        self._push(lane=lane if scenario == "solo" else f"{lane} ({scenario})", level=level, rep=repetition)

    def request_done(self, event: RequestEvent) -> None:
        if event.phase == "background":
            return
        self.done += 1
        self.errors += event.error is not None
        if time.monotonic() - self._pushed >= PUSH_EVERY_S:
            self._push()

    def skip(self, requests: int) -> None:
        self.total = max(self.total - requests, 0)

    def end(self) -> None:
        self._push(state="deriving")


def progress_table(names: list[str], snapshot: dict[str, dict[str, Any]], started: float) -> Table:
    """One row per node: state, lane, level N and repetition, requests done of planned, errors."""
    table = Table(title=f"satbench fleet run — {time.monotonic() - started:.0f} s", expand=False)
    for col in ("node", "state", "lane", "level", "requests", "errors"):
        table.add_column(col)
    for name in names:
        s = snapshot.get(name, {})
        level = f"N={s['level']} rep {s.get('rep', '')}" if "level" in s else ""
        reqs = f"{s.get('done', 0)}/{s.get('total', 0)}" if s.get("total") else ""
        table.add_row(name, str(s.get("state", "pending")), str(s.get("lane", "")), level, reqs,
                      str(s.get("errors", "")) if s.get("total") else "")
    return table
