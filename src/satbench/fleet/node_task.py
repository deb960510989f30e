"""What runs on a fleet node, inside its Ray task: `probe` (who the node is) and `run_node` (the
sweep the CLI hands over, then the node's capability report), both returning plain data the driver
checks. Nothing here trusts the driver's view of the node: the node says where it ran."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

import satbench
from satbench.config.schema import RunConfig, Strict

MAX_RUN_BYTES = 2 << 30  # a run directory brought back through Ray: events and samples of a long sweep
LOG_TAIL_BYTES = 64 << 10

# (config, run directory, progress) → (exit code, error line or None): the CLI's sweep of a new run
SweepFn = Callable[[RunConfig, Path, Any], tuple[int, str | None]]


class Probe(Strict):
    ray_node_id: str
    hostname: str
    hardware_fingerprint: str
    satbench_version: str


class NodeSpec(Strict):
    """What the driver sends a node."""

    node_id: str
    mode: Literal["full", "spot"]
    config: RunConfig
    api_base: list[str] = Field(default_factory=list)
    max_age_days: float = 30.0
    accept_contended: bool = False
    reference: str | None = Field(None, description="spot: the class reference node")
    reference_recommendations: bytes | None = None


class NodeOutcome(Strict):
    node_id: str
    ray_node_id: str = Field(description="where the task ran, as Ray's runtime context on the node says")
    hostname: str
    exit_code: int
    error: str | None = None
    files: dict[str, bytes] = Field(default_factory=dict, description="the run directory, path → bytes")
    capability: str | None = Field(None, description="the node's capability report (JSON)")
    log: str = ""
    sweep_s: float = 0.0
    total_s: float = 0.0


def _here() -> str:
    import ray

    return ray.get_runtime_context().get_node_id()


def probe() -> Probe:
    from satbench.host.gpu import open_nvml
    from satbench.host.hardware import describe_host

    return Probe(ray_node_id=_here(), hostname=socket.gethostname(),
                 hardware_fingerprint=describe_host(open_nvml()).fingerprint_sha256,
                 satbench_version=satbench.__version__)


def run_files(run_dir: Path, limit: int = MAX_RUN_BYTES) -> dict[str, bytes]:
    """Every regular file under `run_dir` (relative path → bytes); links and others are left out."""
    out: dict[str, bytes] = {}
    total = 0
    for path in sorted(run_dir.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        total += len(data)
        if total > limit:
            raise OSError(f"the run directory is over {limit >> 20} MiB: too large to bring back through Ray")
        out[path.relative_to(run_dir).as_posix()] = data
    return out


def node_capability(spec: NodeSpec, recommendations: Path, ray_node_id: str, evidence_path: str) -> str:
    """The node's capability report: its recommendations checked against this node now, its node
    block filled in (node id, api_base, Ray node); the evidence path made the fleet directory's."""
    import datetime as dt

    from satbench.capability.identity import this_node
    from satbench.capability.report import capability_report, render_json

    block = this_node(spec.config.lanes, spec.node_id, spec.api_base, ray_node_id)
    report = capability_report(spec.config, recommendations, dt.timedelta(days=spec.max_age_days),
                               block=block, accept_contended=spec.accept_contended)
    lanes = [lane if lane.evidence is None else lane.model_copy(update={
        "evidence": lane.evidence.model_copy(update={"recommendations_file": evidence_path})})
        for lane in report.lanes]
    return render_json(report.model_copy(update={"lanes": lanes}))


def run_node(spec: NodeSpec, sweep: SweepFn, board: Any = None) -> NodeOutcome:
    """The sweep into a temporary run directory on this node, its files and capability report. Its
    stdout and stderr go to a log whose tail comes back; an exception is an outcome, not a task
    failure, so the driver always learns why."""
    from satbench.fleet.board import BoardProgress
    from satbench.run.lane_session import SilentProgress

    start = time.monotonic()
    here = _here()
    tmp = Path(tempfile.mkdtemp(prefix="satbench-fleet-"))
    run_dir, log_path = tmp / "run", tmp / "node.log"
    code, error, files, capability, sweep_s = 1, None, {}, None, 0.0
    progress = SilentProgress() if board is None else BoardProgress(board, spec.node_id)
    try:
        with open(log_path, "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            try:
                code, error = sweep(spec.config, run_dir, progress)
                sweep_s = time.monotonic() - start
                if spec.mode == "spot" and spec.reference_recommendations is not None:
                    recs, evidence = tmp / "reference-recommendations.json", f"{spec.reference}/run/"
                    recs.write_bytes(spec.reference_recommendations)
                else:
                    recs, evidence = run_dir / "recommendations.json", f"{spec.node_id}/run/"
                if recs.exists():
                    capability = node_capability(spec, recs, here, evidence + "recommendations.json")
                if run_dir.is_dir():
                    files = run_files(run_dir)
            except Exception as exc:  # a bug or a refusal: the driver records it for this node
                error = error or f"{exc.__class__.__name__}: {' '.join(str(exc).split())[:300]}"
                traceback.print_exc()
        return NodeOutcome(node_id=spec.node_id, ray_node_id=here, hostname=socket.gethostname(),
                           exit_code=code, error=error, files=files, capability=capability,
                           log=_tail(log_path), sweep_s=sweep_s, total_s=time.monotonic() - start)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _tail(path: Path) -> str:
    with contextlib.suppress(OSError), open(path, "rb") as fh:
        fh.seek(max(os.path.getsize(path) - LOG_TAIL_BYTES, 0))
        return fh.read().decode("utf-8", "replace")
    return ""
