"""--rate, --rate-requests and --max-concurrency, and their lane-file keys: one meaning each, checked
where they are given (cli/lanekeys.py rows, config/schema.py fields)."""

from __future__ import annotations

import pytest

from satbench.cli.args import build_parser, lane_config
from satbench.cli.lanefile import load_lane_file
from satbench.errors import UserError
from satbench.records.ledger import UnitId, open_unit


def lane(*argv: str):
    return lane_config(build_parser().parse_args(["sweep", "--url", "http://127.0.0.1:9", *argv]))


def test_flags_become_the_lanes_rates():
    got = lane("--rate", "4, 0.5,2", "--max-concurrency", "6", "--rate-requests", "80")
    assert got.rates == [0.5, 2.0, 4.0] and got.max_concurrency == 6 and got.rate_requests == 80
    assert got.arrivals_per_rate(4.0) == 80
    plain = lane()
    assert plain.rates is None and plain.open_cap(3) == 6  # default cap: twice the slots
    # max(100, 20 s × rate)
    assert plain.arrivals_per_rate(0.5) == 100 and plain.arrivals_per_rate(10) == 200


@pytest.mark.parametrize("argv, needle", [
    (["--rate", "fast"], "--rate: expected a number, got 'fast'"),
    (["--rate", "0"], "--rate"),
    (["--rate", "1,1"], "rates repeat"),
    (["--rate", ","], "an empty item"),
    (["--max-concurrency", "0"], "--max-concurrency"),
    (["--rate", "1,,2"], "an empty item"),
    (["--rate", "1,2,"], "an empty item"),
    (["--rate", "1_000"], "digit separators"),
    (["--rate", "1e-300"], "arrivals would take about"),
    (["--rate", "0.0001"], "its 100 arrivals would take about 11.6 days, more than 1 days"),
    (["--rate", "0.01", "--rate-requests", "1000"], "its 1,000 arrivals would take about 1.16 days"),
    (["--max-concurrency", "2"], "--max-concurrency: it acts on open-loop rates only"),
    (["--rate-requests", "80"], "--rate-requests: it acts on open-loop rates only"),
    (["--concurrency", "1,,2"], "an empty item"),
    (["--concurrency", "1_0"], "digit separators"),
])
def test_bad_values_are_one_clear_line(argv, needle):
    with pytest.raises(UserError) as info:
        lane(*argv)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_lane_file_keys(tmp_path):
    p = tmp_path / "lanes.toml"
    p.write_text('[[lanes]]\nname = "a"\nruntime = "url"\nurl = "http://127.0.0.1:9"\nrate = [1, 3]\n'
                 "max_concurrency = 2\nrate_requests = 72\n")
    (got,) = load_lane_file(p).lanes
    assert got.rates == [1.0, 3.0] and got.max_concurrency == 2 and got.rate_requests == 72
    p.write_text('[[lanes]]\nname = "a"\nruntime = "url"\nurl = "http://127.0.0.1:9"\n\nrate = [1, -3]\n')
    bad = r"lanes.toml:6: lanes\[0\].rate\[1\]: must be a finite number above 0"
    with pytest.raises(UserError, match=bad):
        load_lane_file(p)


def test_a_slow_rate_within_a_day_is_accepted():
    got = lane("--rate", "0.002")  # 100 arrivals over ~14 h
    assert got.rates == [0.002] and got.arrivals_per_rate(0.002) / 0.002 < 86_400


def test_the_open_unit_round_trips():
    assert open_unit("dense") == "open/dense"
    assert str(UnitId.parse("open/dense")) == "open/dense"


def test_a_seed_goes_with_rates_alone():
    assert lane("--seed", "5", "--rate", "1").workload.seed == 5
    with pytest.raises(UserError, match="--seed: it draws request lengths and open-loop arrivals"):
        lane("--seed", "5")
