"""run.json: how a run was produced (config, provenance, clock anchor, status).

Written when the run starts, rewritten atomically when it ends. Everything `analyze`
needs besides the raw JSONL files comes from here.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError

from satbench.config import Strict, SweepConfig
from satbench.errors import RunDirError

MANIFEST_FILE = "run.json"
MANIFEST_SCHEMA_VERSION = "1.0"


class ModelInfo(Strict):
    path: str | None = None
    sha256: str | None = None
    size_bytes: int | None = None
    synthetic: bool | None = None
    source: str | None = Field(None, description="builtin package, user path, or served by URL")


class RuntimeInfo(Strict):
    kind: Literal["embedded", "native", "url"]
    name: str = Field(description="xllamacpp wheel, llama-server binary, or remote server")
    version: str | None = None
    llamacpp: bool = Field(description="llama.cpp detected through /props")
    build_info: str | None = Field(None, description="/props build_info as the server reports it")
    base_url: str = Field(description="server URL without credentials")
    total_slots: int | None = None
    per_slot_ctx: int | None = None
    model_alias: str | None = None
    server_args: list[str] = Field(default_factory=list)
    pid: int | None = None


class GpuInfo(Strict):
    name: str
    memory_total_bytes: int | None = None
    driver: str | None = None
    cuda: str | None = None


class HostInfo(Strict):
    cpu_model: str
    cores_logical: int
    cores_physical: int | None = None
    ram_bytes: int
    os: str
    python: str
    gpus: list[GpuInfo] = Field(default_factory=list)


class NetworkInfo(Strict):
    path: Literal["loopback", "remote"]
    rtt_ms_median: float | None = None
    rtt_ms_p95: float | None = None
    rtt_samples: int = 0


class Provenance(Strict):
    satbench_version: str
    satbench_commit: str | None = None
    model: ModelInfo
    runtime: RuntimeInfo
    host: HostInfo
    network: NetworkInfo


class ClockAnchor(Strict):
    """One wall-clock stamp per run, paired with the monotonic clock at the same moment."""

    wall_time_ns: int
    perf_counter_ns: int


RunStatus = Literal["running", "complete", "failed", "interrupted"]


class RunManifest(Strict):
    schema_version: str = MANIFEST_SCHEMA_VERSION
    run_id: str
    command_line: list[str]
    started_at: str
    finished_at: str | None = None
    clock_anchor: ClockAnchor
    status: RunStatus = "running"
    status_reason: str | None = None
    config: SweepConfig
    provenance: Provenance | None = None


def write_json_atomic(path: Path, text: str) -> None:
    """Write `text` to a temporary file beside `path`, fsync it, then rename over `path`."""
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.fchmod(fd, 0o644)  # mkstemp makes 0600; results are meant to be shared
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        raise RunDirError(f"cannot write {path}: {exc.strerror or exc}") from exc


def write_manifest(run_dir: Path, manifest: RunManifest) -> None:
    write_json_atomic(run_dir / MANIFEST_FILE, manifest.model_dump_json(indent=2) + "\n")


def read_manifest(run_dir: Path) -> RunManifest:
    path = run_dir / MANIFEST_FILE
    if not path.exists():
        raise RunDirError(f"{run_dir} is not a satbench run directory (no {MANIFEST_FILE})")
    try:
        return RunManifest.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, ValidationError) as exc:
        raise RunDirError(f"{path} is not a valid run manifest: {exc.__class__.__name__}") from exc
