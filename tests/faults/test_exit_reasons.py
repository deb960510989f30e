"""Every outcome ends with its class's exit code and says why: a rate whose requests mostly failed,
a run with nothing measurable, a half-written results.json; the table in docs/faults.md is what every
command returns."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from satbench.cli.args import build_parser
from satbench.cli.exits import EXIT_CODES, OK, RUN_DIR, USAGE
from satbench.cli.main import main
from tests.bundles import unpacked_copy
from tests.faults.common import small_sweep


def test_a_rate_whose_requests_mostly_time_out_fails_and_says_so(fake_server, tmp_path, capsys):
    """One slot, 150 ms a step, 2 tokens, a 0.6 s request timeout: the closed level's lone requests fit
    (~0.3 s), the rate's 20 arrivals at 40/s queue behind each other and most time out. The rate ends
    failed (exit 4, one line naming the count and the commonest error), never a silent exit 0."""
    fake = fake_server(n_slots=1, decode_iteration_ms=150.0)
    run_dir = tmp_path / "run"
    code = main(small_sweep(fake.base_url, run_dir, levels="1", requests=3, output=2,
                            extra=("--rate", "40", "--rate-requests", "20", "--max-concurrency", "20",
                                   "--request-timeout", "0.6")))
    err = capsys.readouterr().err
    assert code == 4, err[-2000:]
    assert "Traceback" not in err
    line = next(ln for ln in err.splitlines() if "rate 40/s" in ln)
    assert re.search(r"failed: \d+ of its 20 requests failed \(most: timeout, \d+\)", line), line
    events = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    rate = [e for e in events if e.get("kind") == "request" and e["scenario"] == "open"]
    assert len(rate) == 20 and sum(e["error"] is not None for e in rate) > 10  # every request is data


ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "faults.md"
BUNDLE = ROOT / "evidence" / "cpu-2core-2026-12-01" / "run"


def _table() -> dict[str, set[int]]:
    """docs/faults.md's "Exit codes by command": command → the codes it can end with."""
    section = DOC.read_text(encoding="utf-8").split("## Exit codes by command", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([a-z ]+)` \| ([\d, ]+) \|$", section, flags=re.M)
    return {cmd: {int(c) for c in codes.split(",")} for cmd, codes in rows}


def test_the_table_names_every_command_and_only_known_codes():
    table = _table()
    known = {e.code for e in EXIT_CODES}
    assert all(codes <= known and USAGE in codes and OK in codes for codes in table.values()), table
    tops = build_parser()._subparsers._group_actions[0].choices
    assert set(tops) == {cmd.split()[0] for cmd in table}
    for cmd in table:
        sub = tops[cmd.split()[0]]
        for word in cmd.split()[1:]:
            sub = sub._subparsers._group_actions[0].choices[word]  # a nested command that exists


@pytest.mark.parametrize("cmd", sorted(_table()))
def test_every_command_refuses_an_unknown_flag_with_the_usage_code(cmd, capsys):
    assert main([*cmd.split(), "--no-such-flag"]) == USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("satbench: error: "), err  # the flag, or a missing argument


@pytest.fixture(scope="module")
def half_written(tmp_path_factory):
    """The committed bundle with its results.json cut mid-way, as a crash while writing leaves it."""
    run = unpacked_copy(BUNDLE, tmp_path_factory.mktemp("half") / "run")
    text = (run / "results.json").read_bytes()
    (run / "results.json").write_bytes(text[: len(text) // 2])
    return run


@pytest.mark.parametrize("argv", [
    ["analyze", "{missing}"], ["recommend", "{missing}"], ["report", "{missing}"], ["verify", "{missing}"],
    ["compare", "{missing}", "{missing}"], ["report", "{half}"], ["recommend", "{half}"],
    ["compare", "{half}", "{half}"]])
def test_a_missing_or_half_written_run_directory_is_the_run_directory_code(argv, half_written, tmp_path,
                                                                          capsys):
    argv = [a.format(missing=tmp_path / "nope", half=half_written) for a in argv]
    assert RUN_DIR in _table()[argv[0]]
    assert main(argv) == RUN_DIR
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("satbench: error: ") and "Traceback" not in "\n".join(err)
