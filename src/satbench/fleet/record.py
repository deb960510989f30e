"""fleet.json: what a fleet run did on every node (placed where, ran where, measured how, verified or
not, or why not), and the files the fleet directory keeps (`store_node_run`)."""

from __future__ import annotations

import shutil
from pathlib import Path, PurePosixPath
from typing import Literal

from pydantic import Field

from satbench.config.schema import Strict
from satbench.fleet.merge import Refusal
from satbench.fleet.spot import SpotVerdict

FLEET_RECORD_VERSION = "1.0"
NodeState = Literal["ok", "failed", "unreachable", "lost", "timed_out", "rejected"]


class VerifySummary(Strict):
    ok: bool
    files_checked: int
    problems: list[str] = Field(default_factory=list)


class NodeRecord(Strict):
    node_id: str
    selector: str
    state: NodeState = "failed"
    reason: str | None = None
    mode: Literal["full", "spot", "spot+full"] | None = None
    ray_node_id: str | None = Field(None, description="the Ray node the task was pinned to")
    ran_on: str | None = Field(None, description="the Ray node the task says it ran on")
    hostname: str | None = None
    address: str | None = None
    hardware_fingerprint: str | None = None
    class_reference: str | None = Field(None, description="--per-class: the node measured in full for its "
                                                          "class")
    gpus: float = 0.0
    exit_code: int | None = None
    verify: VerifySummary | None = None
    spot: SpotVerdict | None = None
    flags: list[str] = Field(default_factory=list)
    sweep_s: float | None = Field(None, description="the sweep on the node")
    task_s: float | None = Field(None, description="the task on the node, sweep and capability included")
    transfer_bytes: int = Field(0, description="the run directory's bytes brought back through Ray")
    store_s: float | None = Field(None, description="the driver: writing and verifying the run directory")


class FleetRecord(Strict):
    schema_version: str = FLEET_RECORD_VERSION
    started_at: str
    finished_at: str | None = None
    address: str | None = None
    inventory: str
    lane_file: str
    per_class: bool = False
    ray_connect_s: float | None = None
    probe_s: float | None = None
    wall_s: float | None = None
    driver_cpu_s: float | None = Field(None, description="CPU seconds the driver process used for the run")
    nodes: list[NodeRecord] = Field(default_factory=list)
    merged: list[str] = Field(default_factory=list, description="the node ids in the merged outputs")
    refused: list[Refusal] = Field(default_factory=list)


def _safe(rel: str) -> bool:
    p = PurePosixPath(rel)
    return not p.is_absolute() and ".." not in p.parts and rel != ""


def store_node_run(node_dir: Path, kind: str, files: dict[str, bytes]) -> tuple[Path, VerifySummary]:
    """The run directory's files written to `node_dir/<kind>.partial`, verified there as `satbench
    verify` does it (pipeline.verify), then kept as `node_dir/<kind>` when it passes, else as
    `node_dir/<kind>.rejected`: (where it is, the verification)."""
    from satbench.errors import SatbenchError
    from satbench.pipeline import verify

    partial = node_dir / f"{kind}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    unsafe = sorted(rel for rel in files if not _safe(rel))
    if unsafe:
        return partial, VerifySummary(ok=False, files_checked=0, problems=[f"unsafe path {unsafe[0]!r}"])
    for rel, data in files.items():
        path = partial / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    try:
        v = verify(partial)
        problems = ([f"MODIFIED: {x}" for x in v.modified] + [f"MISSING: {x}" for x in v.missing]
                    + [f"INCONSISTENT: {x}" for x in v.inconsistent]
                    + [f"NOT COVERED: {x}" for x in v.uncovered])
        summary = VerifySummary(ok=v.ok, files_checked=v.files_checked, problems=problems)
    except SatbenchError as exc:
        summary = VerifySummary(ok=False, files_checked=0, problems=[str(exc)[:300]])
    final = node_dir / (kind if summary.ok else f"{kind}.rejected")
    shutil.rmtree(final, ignore_errors=True)
    partial.rename(final)
    return final, summary
