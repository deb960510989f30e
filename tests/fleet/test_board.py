"""The fleet's live view: BoardProgress tells a board each node's lane, level and requests, and
progress_table draws one row per node from the board's snapshot (no Ray needed: a stand-in board)."""

from __future__ import annotations

import io

from rich.console import Console

from satbench.fleet.board import Board, BoardProgress, progress_table


class _Remote:
    """board.update.remote(...) as Ray's actor handle offers it, called at once."""

    def __init__(self, board: Board) -> None:
        self.update = type("M", (), {"remote": staticmethod(board.update)})()


def _render(table) -> str:
    out = io.StringIO()
    Console(file=out, width=120).print(table)
    return out.getvalue()


def test_each_node_shows_its_lane_level_and_requests():
    board = Board()
    p = BoardProgress(_Remote(board), "node-0")
    p.begin(40)
    p.level("dense", "solo", 4, 2)
    text = _render(progress_table(["node-0", "node-1"], board.snapshot(), started=0.0))
    row = next(line for line in text.splitlines() if "node-0" in line)
    assert "running" in row and "dense" in row and "N=4 rep 2" in row and "0/40" in row
    assert "pending" in next(line for line in text.splitlines() if "node-1" in line)


def test_a_fairness_check_is_named_beside_its_lane():
    board = Board()
    BoardProgress(_Remote(board), "n").level("v4", "fairness S1", 4, 1)
    assert board.snapshot()["n"]["lane"] == "v4 (fairness S1)"
