"""run.json's ledger units: the typed form writes exactly the strings run directories hold, and reads
them back; the Ledger writes every change at once."""

from __future__ import annotations

import pytest

from satbench.records.ledger import (
    Ledger,
    UnitId,
    fairness_unit,
    is_start_unit,
    refine_unit,
    solo_unit,
    start_unit,
    together_unit,
)
from satbench.records.manifest import read_manifest
from tests.conftest import url_lane_config

WRITTEN = {  # the strings run directories already hold, and the unit each one is
    "solo/default/8/2": UnitId.solo("default", 8, 2),
    "together/0/1": UnitId.together(0, 1),
    "fairness/a-1.b": UnitId.fairness("a-1.b"),
    "refine/x": UnitId.refine("x"),
    "solo/b/start": UnitId.start("solo", "b"),
    "together/b/start": UnitId.start("together", "b"),
}


@pytest.mark.parametrize("text", sorted(WRITTEN))
def test_a_unit_string_round_trips(text):
    assert UnitId.parse(text) == WRITTEN[text]
    assert str(WRITTEN[text]) == text


def test_the_builders_write_todays_strings():
    assert solo_unit("a", 16, 3) == "solo/a/16/3"
    assert together_unit(2, 1) == "together/2/1"
    assert fairness_unit("a") == "fairness/a"
    assert refine_unit("a") == "refine/a"
    assert start_unit("together", "a") == "together/a/start"


@pytest.mark.parametrize("text", ["", "solo", "solo/a/8", "solo/a/08/1", "solo/a/x/1", "together/1",
                                  "fairness/a/b", "other/a", "fairness/start/start", "x/start"])
def test_a_string_satbench_never_writes_is_no_unit(text):
    assert UnitId.parse(text) is None
    assert not is_start_unit(text)


def test_only_a_server_that_did_not_start_is_a_start_unit():
    assert is_start_unit("solo/a/start") and is_start_unit("together/a/start")
    assert not any(is_start_unit(u) for u in ("solo/a/1/1", "together/0/1", "fairness/start", "refine/a"))


def test_the_ledger_writes_each_change(tmp_path):
    cfg = url_lane_config("http://127.0.0.1:9", [1, 2], requests=4, reps=1)
    ledger = Ledger.new(tmp_path, ["t"], cfg)
    ledger.write()
    assert not ledger.done("solo/default/1/1") and not ledger.any_completed()
    ledger.complete("solo/default/1/1")
    ledger.keep_refine_levels("default", [3])
    on_disk = read_manifest(tmp_path)
    assert on_disk.completed_units == ["solo/default/1/1"] and on_disk.refine_levels == {"default": [3]}
    assert ledger.done("solo/default/1/1") and ledger.refine_levels("default") == [3]
    ledger.finish("complete", None, "2024-01-01T00:00:00+00:00")
    assert read_manifest(tmp_path).status == "complete"
