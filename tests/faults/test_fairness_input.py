"""Fairness settings a check cannot run as meant, or that satbench's memory cannot hold, are refused
in one line before anything starts (no server, no run directory)."""

from __future__ import annotations

from pathlib import Path

import pytest

from satbench.cli.main import main
from satbench.config.schema import FairnessConfig, LaneConfig, RunConfig, ServerParams
from satbench.errors import UserError
from satbench.host import hardware
from satbench.workload.budget import (
    MAX_CHECK_PLANNED,
    MAX_CHECK_STREAMS,
    _check_bytes,
    check_memory_fits,
    fairness_checks,
)
from satbench.workload.fairness_plan import make_plan
from tests.faults.common import one_error_line

HEAD = '[[lanes]]\nname = "a"\nconcurrency = [1, 2]\n[lanes.server]\nparallel = 2\n'


SWEEP, FAIRNESS = ["sweep", "--with-fairness"], ["fairness"]  # fairness runs the checks only (fairness_only)


def _refused(tmp_path: Path, capsys, marker_bin, fairness: str, command: list[str] = SWEEP) -> str:
    server_bin, marker = marker_bin
    lanes = tmp_path / "lanes.toml"
    native = f'name = "a"\nruntime = "native"\nserver_bin = "{server_bin}"\n'
    lanes.write_text(HEAD.replace('name = "a"\n', native) + "[lanes.fairness]\n" + fairness)
    out = tmp_path / "out"
    code = main([*command, "--lanes", str(lanes), "-o", str(out / "run")])
    err = capsys.readouterr().err
    line = one_error_line(err)
    assert code == UserError.exit_code, err
    assert not out.exists() and not marker.exists()
    return line


@pytest.mark.parametrize("command", [SWEEP, FAIRNESS], ids=["with-fairness", "fairness-only"])
def test_the_reviewers_settings_are_refused_before_the_server_starts(tmp_path, capsys, marker_bin, command):
    line = _refused(tmp_path, capsys, marker_bin,
                    "s1_decoders = 4096\nf3_extra_clients = 4096\nf3_requests_per_client = 1000\n", command)
    assert line.startswith("satbench: error: lane a: fairness s1_decoders 4096: S1 needs a slot for each "
                           "decoder"), line
    assert "the lane has 2 slots; use at most 1" in line


def test_too_many_f3_clients_are_refused_naming_the_caps(tmp_path, capsys, marker_bin):
    line = _refused(tmp_path, capsys, marker_bin, "f3_extra_clients = 4096\n")
    assert f"lane a: fairness check F3 would run 4,098 streams and build 20,490 requests; at most " \
           f"{MAX_CHECK_STREAMS:,} streams and {MAX_CHECK_PLANNED:,} requests per check" in line, line


def test_too_many_f3_requests_are_refused(tmp_path, capsys, marker_bin):
    line = _refused(tmp_path, capsys, marker_bin, "f3_extra_clients = 200\nf3_requests_per_client = 1000\n")
    assert "fairness check F3 would run 202 streams and build 202,202 requests" in line, line


def test_a_fairness_check_memory_cannot_hold_is_refused(tmp_path, capsys, marker_bin, monkeypatch):
    monkeypatch.setattr(hardware, "ram_available", lambda: 64 * 2**20)  # 64 MiB left
    settings = "f3_extra_clients = 2000\nf3_requests_per_client = 40\n"
    line = _refused(tmp_path, capsys, marker_bin, settings, FAIRNESS)
    assert "lane a: fairness check F3: satbench would need about" in line, line
    assert "0.1 GiB of memory" in line


def test_the_fairness_memory_rule_sizes_the_largest_check():
    lane = LaneConfig(levels=[4], server=ServerParams(n_parallel=4),
                      fairness=FairnessConfig(f3_extra_clients=100, f3_requests_per_client=50))
    sizes = fairness_checks(lane)
    assert sizes["F3"][:2] == (104 * 51, 104)
    need = _check_bytes(*sizes["F3"])
    assert need == max(_check_bytes(*s) for s in sizes.values())
    cfg = RunConfig(lanes=[lane], fairness_only=True)
    check_memory_fits(cfg, True, available_bytes=need)  # exactly fits
    with pytest.raises(UserError, match=r"lane .*: fairness check F3: satbench would need"):
        check_memory_fits(cfg, True, available_bytes=need - 1)
    check_memory_fits(RunConfig(lanes=[lane]), True, available_bytes=need - 1)  # no fairness: not counted


def test_the_plan_never_gives_s1_more_decoders_than_slots_leave():
    lane = LaneConfig(levels=[2], fairness=FairnessConfig(s1_decoders=4096))
    assert make_plan(lane, 2).s1_decoders == 1
    assert make_plan(lane, 64).s1_decoders == 63
    assert make_plan(LaneConfig(levels=[2]), 64).s1_decoders == 3  # the default is unchanged


def test_a_running_servers_lane_keeps_its_explicit_decoders_unchecked_against_a_guess():
    runtime = {"kind": "url", "url": "http://127.0.0.1:9", "model": None}
    lane = LaneConfig(name="r", levels=[2], runtime=runtime, fairness=FairnessConfig(s1_decoders=8))
    check_memory_fits(RunConfig(lanes=[lane], with_fairness=True), True, available_bytes=1 << 40)
