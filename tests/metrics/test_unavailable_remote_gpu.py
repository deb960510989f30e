"""A url lane over a remote path has no GPU figures because its server computes on another machine,
not because this one has no GPU: the level says so."""

from __future__ import annotations

from satbench.metrics.level_result import LevelContext
from satbench.metrics.unavailable import unavailable_figures
from tests.report.test_compare import lane


def _ctx(remote: bool) -> LevelContext:
    return LevelContext(lane="l", level=1, repetitions_planned=1, measured_requests_planned=8, slots=4,
                        per_slot_ctx=512, prompt_tokens=32, output_tokens=8, overhead_ms=0.1, llamacpp=True,
                        server_remote=remote)


def test_a_remote_servers_missing_gpu_is_not_called_no_gpu_here():
    level = lane(levels=(1,)).levels[0]
    assert level.memory.peak_gpu_mem_bytes is None
    assert unavailable_figures(_ctx(False), level)["gpu"] == "no GPU visible through NVML"
    why = unavailable_figures(_ctx(True), level)["gpu"]
    assert why.startswith("the server runs on another machine") and "not visible to satbench" in why
