"""Capability reports made in memory, as nodes would write them (no server, no Ray)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from satbench.capability.identity import NodeBlock
from satbench.capability.report import CapabilityReport, LaneCapability, render_json
from satbench.records.manifest import HostInfo

NOW = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)


def host(cpu: str = "AMD EPYC 9654", cores: int = 96) -> HostInfo:
    h = HostInfo(cpu_model=cpu, cores_logical=cores, cores_physical=cores // 2, cores_usable=cores,
                 ram_bytes=2**38, os="Linux 6.8", python="3.11")
    return h.model_copy(update={"fingerprint_sha256": h.fingerprint()})


def lane(name: str, concurrency: int = 4, tok: float = 120.0, measured: bool = True) -> LaneCapability:
    if not measured:
        return LaneCapability(lane=name, status="unmeasured", reason="no recommendation for this lane",
                              model_path=None, model_sha256=None, max_concurrency=1)
    return LaneCapability(lane=name, status="measured", model_path="/m/x.gguf", model_sha256="a" * 64,
                          max_concurrency=concurrency, expected_output_tok_per_s=tok,
                          expected_p95_ttft_ms=210.4,
                          expected_p95_tpot_ms=12.5, measured_at=(NOW - dt.timedelta(hours=1)).isoformat())


def report(node_id: str, lanes: list[LaneCapability], at: dt.datetime = NOW, hw: HostInfo | None = None,
           api_base: dict[str, str] | None = None, hostname: str | None = None,
           addresses: list[str] | None = None) -> CapabilityReport:
    hw = hw or host()
    hostname = hostname or node_id
    bases = api_base if api_base is not None else {x.lane: f"http://{hostname}:8080/v1" for x in lanes}
    node = NodeBlock(node_id=node_id, hostname=hostname, addresses=addresses or ["10.0.0.1"], api_base=bases)
    return CapabilityReport(generated_at=at.isoformat(timespec="seconds"),
                            hardware_fingerprint=hw.fingerprint_sha256, hardware=hw, node=node, lanes=lanes)


def no_recommendations(tmp: Path) -> Path:
    """A valid recommendations file that recommends nothing: `satbench capability` reads it and
    advertises every lane unmeasured."""
    from satbench.saturation.recommendations_file import RecommendationsFile

    path = tmp / "recommendations.json"
    recs = RecommendationsFile(created_at=NOW.isoformat(), satbench_version="0", satbench_commit=None,
                               run_id="none", results_sha256="0" * 64, lanes=[])
    path.write_text(recs.model_dump_json())
    return path


def write(tmp: Path, name: str, rep: CapabilityReport) -> Path:
    path = tmp / f"{name}.json"
    path.write_text(render_json(rep))
    return path
