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
from satbench.records.manifest import (
    HostInfo,
    ModelInfo,
    NetworkInfo,
    PlanDecision,
    Provenance,
    RuntimeInfo,
    ServerFailure,
    read_manifest,
)
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


class StartedAt:
    """A started server as run.json records it (ledger.StartedServer), named by `name`."""

    def __init__(self, name: str) -> None:
        self.name = name

    def model_info(self) -> ModelInfo:
        return ModelInfo(path="/m.gguf")

    def runtime_info(self) -> RuntimeInfo:
        return RuntimeInfo(kind="url", name=self.name, llamacpp=True, base_url="http://127.0.0.1:9")

    def network_info(self) -> NetworkInfo:
        return NetworkInfo(path="loopback")


def test_a_change_makes_a_new_manifest_and_leaves_the_old_one(tmp_path):
    cfg = url_lane_config("http://127.0.0.1:9", [1], requests=4, reps=1)
    ledger = Ledger.new(tmp_path, ["t"], cfg)
    ledger.keep_provenance(Provenance(satbench_version="0", host=HostInfo(
        cpu_model="c", cores_logical=1, ram_bytes=1 << 30, os="Linux", python="3.11")))
    before = ledger.manifest
    dump = before.model_dump_json()
    ledger.record_server("default", "fairness", 0, StartedAt("fair"))
    ledger.record_server("default", "solo", 0, StartedAt("solo"))
    ledger.record_server("default", "together", 0, StartedAt("both"))
    ledger.complete("solo/default/1/1")
    decision = PlanDecision(action="measure", level=1, repetition=1, reason="starts at N=1", elapsed_s=0.0)
    ledger.keep_decision("default", decision)
    failure = ServerFailure(lane="default", scenario="solo", level=1, repetition=1, unit="solo/default/1/1",
                            reason="gone")
    ledger.add_failure(failure)
    ledger.replace_failure(failure, failure.model_copy(update={"restarted": True}))
    ledger.finish("complete", None, "2024-01-01T00:00:00+00:00")
    assert before.model_dump_json() == dump and ledger.manifest is not before
    on_disk = read_manifest(tmp_path)
    assert on_disk == ledger.manifest
    assert on_disk.provenance is not None
    lane = on_disk.provenance.lanes["default"]
    assert (lane.runtime.name, lane.fairness_runtime, lane.together_runtime) == (
        "solo", StartedAt("fair").runtime_info(), StartedAt("both").runtime_info())
    assert on_disk.completed_units == ["solo/default/1/1"] and on_disk.plan == {"default": [decision]}
    assert [f.restarted for f in on_disk.server_failures] == [True] and on_disk.status == "complete"
