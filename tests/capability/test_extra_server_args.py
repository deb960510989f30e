"""Capability refuses a figure measured with other extra llama-server flags than the node's lane gives
its server (--server-arg, [lanes.server] args): flash attention or a quantised KV cache change what the
node can hold and how fast (capability/checks.py flags_mismatch)."""

from __future__ import annotations

from satbench.capability.checks import flags_mismatch
from satbench.capability.node import NodeLane
from satbench.records.manifest import RuntimeInfo


def runtime(extra: list[str]) -> RuntimeInfo:
    return RuntimeInfo(kind="native", name="llama-server", llamacpp=True, base_url="http://127.0.0.1:1",
                       server_args=["--parallel", "4", *extra, "--metrics", "--slots"],
                       extra_server_args=extra)


def node(extra: list[str] | None, kind: str = "native") -> NodeLane:
    return NodeLane(lane="dense", model_path="m.gguf", model_sha256=None, runtime_kind=kind,
                    runtime_build="11549", extra_server_args=extra)


def test_the_same_extra_flags_pass_and_others_are_refused():
    assert flags_mismatch(runtime(["-fa", "on"]), node(["-fa", "on"])) is None
    assert flags_mismatch(runtime([]), node([])) is None
    why = flags_mismatch(runtime(["-fa", "on", "-ctk", "q8_0"]), node([]))
    assert why is not None and "'-fa on -ctk q8_0'" in why and "gives 'none'" in why
    assert flags_mismatch(runtime([]), node(["-fa", "on"])) is not None


def test_a_url_lane_is_not_compared():
    assert flags_mismatch(runtime(["-fa", "on"]), node(None, "url")) is None
