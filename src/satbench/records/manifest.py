"""run.json: how a run was produced (config, provenance, clock anchor, status).

Written when the run starts, rewritten atomically when it ends. Everything `analyze`
needs besides the raw JSONL files comes from here.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError

from satbench.config.ranges import RECORDED
from satbench.config.runtime import runtime_class
from satbench.config.schema import RunConfig, RuntimeKind
from satbench.errors import RunDirError
from satbench.records.atomic import write_text_atomic as write_text_atomic  # its callers' import
from satbench.records.record import Record

MANIFEST_FILE = "run.json"
MANIFEST_SCHEMA_VERSION = "2.13"  # what each version added: docs/schemas.md
MAX_MANIFEST_BYTES = 64 << 20  # run.json holds a config, provenance and ledgers: a few hundred KiB at most


class ModelInfo(Record):
    """The model file a lane served, and what its GGUF header says it is (gguf/header). The header's
    figures are null for a url lane (the file is on the server's machine, not read) and in records
    written before run.json 2.10 (not recorded)."""

    path: str | None = None
    sha256: str | None = None
    size_bytes: int | None = None
    synthetic: bool | None = None
    source: str | None = Field(None, description="builtin package, user path, or served by URL")
    architecture: str | None = Field(None, description="general.architecture, e.g. llama, qwen3moe, "
                                     "deepseek2, deepseek4, gemma3")
    name: str | None = Field(None, description="general.name, as the file's writer named the model")
    parameter_count: int | None = Field(None, description="general.parameter_count, else the sum over the "
                                        "tensors of their element counts")
    file_type: str | None = Field(None, description="general.file_type by llama.cpp's name (Q4_K_M, Q8_0, "
                                  "F16, ...); without it the matrices' predominant tensor type + "
                                  "' (guessed)'")
    context_length: int | None = Field(None, description="{architecture}.context_length: the context the "
                                       "model was trained for (not the server's)")
    expert_count: int | None = Field(None, description="{architecture}.expert_count: routed experts "
                                     "(null: a dense model, or not said)")
    expert_used_count: int | None = Field(None, description="{architecture}.expert_used_count: experts "
                                          "used per token")


BufferKind = Literal["model", "kv", "state", "compute", "output"]


class BufferSize(Record):
    """One buffer line of llama.cpp's log: what it allocated, on which backend buffer."""

    kind: BufferKind = Field(description="model weights, KV cache, recurrent or compressor state (RS, DSV4), "
                                         "compute scratch, or logits output")
    buffer: str = Field(description="llama.cpp's buffer name: CPU, CPU_Mapped, CUDA0, CUDA_Host, ...")
    bytes: int = Field(description="as printed, in MiB with 2 decimals, times 2^20 (within 5.3 KB)")


class ServerMemory(Record):
    """What a started server's memory held, from llama.cpp's own log (its buffer lines, printed at
    log verbosity >= 4, for this start only), and the memory left on the machine right after."""

    buffers: list[BufferSize] = Field(default_factory=list, description="every buffer line, in log order")
    n_seq_max: int | None = Field(None, description="llama_context n_seq_max: the sequences (slots) cached")
    n_ctx: int | None = Field(None, description="llama_context n_ctx: the context over all of them")
    ram_available_bytes: int | None = Field(None, description="host RAM available once the server answered "
                                            "(psutil, capped by a cgroup memory limit)")
    gpu_free_bytes: int | None = Field(None, description="NVML free memory, all GPUs, once it answered")
    ram_available_end_bytes: int | None = Field(None, description="the same once the lane's levels had run "
                                                "(its prompt cache at its fullest)")
    gpu_free_end_bytes: int | None = Field(None, description="NVML free memory then")
    gpu_devices: int | None = Field(None, description="GPUs NVML sees on this machine")
    model_pages_reclaimable: bool | None = Field(
        None, description="the model file's mapped pages count as available RAM (page cache of a file on "
                          "disk); false on tmpfs (/dev/shm), whose pages are used memory already")
    log_lines: list[str] = Field(default_factory=list, description="the lines read (time stamp cut)")


class RuntimeInfo(Record):
    kind: RuntimeKind
    name: str = Field(description="xllamacpp wheel, llama-server binary, or running server (--url)")
    version: str | None = None
    llamacpp: bool = Field(description="llama.cpp detected through /props")
    build_info: str | None = Field(None, description="/props build_info as the server reports it")
    build_number: int | None = Field(None, description="llama.cpp build number parsed from build_info")
    build_commit: str | None = Field(None, description="llama.cpp commit parsed from build_info")
    binary_sha256: str | None = Field(
        None, description="native llama-server: sha256 over the executable and the shared libraries beside "
                          "it (identifies a build that reports no build number)")
    backend: str | None = Field(
        None, description="devices the server computes on, e.g. 'CPU' or 'CUDA0 (NVIDIA H200)'")
    base_url: str = Field(description="server URL without credentials")
    total_slots: int | None = None
    per_slot_ctx: int | None = None
    model_alias: str | None = None
    server_args: list[str] = Field(default_factory=list)
    extra_server_args: list[str] = Field(default_factory=list, description="the lane's extra llama-server "
                                         "flags (--server-arg), the tail of server_args; [] for a url lane")
    server_arg_files: dict[str, str] = Field(default_factory=dict, description="the files the extra flags "
                                             "read (a chat template, a LoRA, a draft model) → their sha256")
    pid: int | None = None
    memory: ServerMemory | None = Field(None, description="the server's buffers once started (null: a "
                                        "running server, whose log satbench does not read, or before 2.7)")

    @property
    def starts_server(self) -> bool:
        """satbench started this server (its kind's class says: config/runtime); False for a running one."""
        return runtime_class(self.kind).starts_server


class GpuInfo(Record):
    name: str
    memory_total_bytes: int | None = None
    driver: str | None = None
    cuda: str | None = None


RAM_CLASS_GIB = 4  # RAM is identified by the multiple of 4 GiB at or above it (installed size, roughly)


class HostInfo(Record):
    cpu_model: str
    cpu_signature: str | None = Field(
        None, description="x86: 'family F model M stepping S' from /proc/cpuinfo "
                          "(tells CPU generations apart where a VM shows a bare model name)")
    cores_logical: int
    cores_physical: int | None = None
    cores_usable: int | None = Field(
        None, description="cores this process may run on: CPU affinity, capped by "
                          "a cgroup CPU quota (a container's --cpus); what the server can use")
    ram_bytes: int
    os: str
    python: str
    gpus: list[GpuInfo] = Field(default_factory=list)
    fingerprint_sha256: str = Field("", description="stable hash of the identity fields, see fingerprint()")

    def identity(self) -> dict:
        """What makes two machines the same for a recommendation: CPU (name and signature), cores
        (logical, physical, usable), RAM class (the multiple of 4 GiB at or above it, so a kernel
        that reserves a little more or less memory is the same machine), the OS family (not the
        kernel release: a kernel update is not another machine), and every GPU's name, memory
        (whole GiB), driver and CUDA version. Python is not in it."""
        return {
            "cpu_model": self.cpu_model, "cpu_signature": self.cpu_signature,
            "cores_logical": self.cores_logical,
            "cores_physical": self.cores_physical, "cores_usable": self.cores_usable,
            "ram_gib": RAM_CLASS_GIB * math.ceil(self.ram_bytes / (RAM_CLASS_GIB * 2**30)),
            "os": self.os.split(" ", 1)[0],
            "gpus": [{"name": g.name, "memory_gib": None if g.memory_total_bytes is None
                      else round(g.memory_total_bytes / 2**30), "driver": g.driver, "cuda": g.cuda}
                     for g in self.gpus],
        }

    def older_scheme_of(self, host: HostInfo) -> bool:
        """This record is `host` as an earlier satbench described it: recorded without the fields
        the current fingerprint scheme added (its stored fingerprint is of the older scheme), and
        equal to `host` in everything it did record."""
        if self.cores_usable is not None:
            return False
        theirs, mine = self.identity(), host.identity()
        for key in ("cpu_signature", "cores_usable"):
            if theirs[key] is None:
                mine[key] = None
        return theirs == mine

    def fingerprint(self) -> str:
        """sha256 of the canonical JSON of identity() (sorted keys, no spaces;
        docs/definitions.md#hardware-fingerprint)."""
        canon = json.dumps(self.identity(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canon.encode()).hexdigest()


class NetworkInfo(Record):
    path: Literal["loopback", "remote"]
    rtt_ms_median: float | None = None
    rtt_ms_p95: float | None = None
    rtt_samples: int = 0
    server_on_this_machine: bool | None = Field(
        None, description="the server's address is one of the measuring machine's (loopback, or an address "
                          "of its own interfaces); null in runs recorded before it was "
                          "(then: path == loopback)")

    @property
    def on_this_machine(self) -> bool:
        """The server ran on the machine that measured it (so its hardware block describes the server's)."""
        if self.server_on_this_machine is not None:
            return self.server_on_this_machine
        return self.path == "loopback"


class LaneProvenance(Record):
    """What one lane served and how: model file, server build and backend, network path."""

    model: ModelInfo
    runtime: RuntimeInfo
    network: NetworkInfo
    together_runtime: RuntimeInfo | None = Field(
        None, description="the server started again for the together scenario (same build, new process)")
    fairness_runtime: RuntimeInfo | None = Field(
        None, description="the server started for the fairness checks (context sized for their prompts)")
    fairness_network: NetworkInfo | None = None

    def solo_recorded(self) -> bool:
        """Whether `runtime` and `network` are the lane's own server's: the fairness checks run first,
        and until the lane's first other start replaces them, they hold its fairness server's."""
        return self.fairness_runtime is None or (self.runtime, self.network) != (self.fairness_runtime,
                                                                                 self.fairness_network)


class Provenance(Record):
    """Recorded once per run; every lane result carries the host part and its own lane part."""

    satbench_version: str
    satbench_commit: str | None = None
    satbench_modified_files: list[str] = Field(
        default_factory=list, description="files of the satbench checkout modified since that commit")
    host: HostInfo
    lanes: dict[str, LaneProvenance] = Field(default_factory=dict)
    event_loop: Literal["uvloop", "asyncio"] | None = Field(
        None, description="the event loop the load generator ran on (load/eventloop.py); null in runs "
                          "made before it was recorded")


class ClockAnchor(Record):
    """One wall-clock stamp per run, paired with the monotonic clock at the same moment."""

    wall_time_ns: int
    perf_counter_ns: int


RunStatus = Literal["running", "complete", "failed", "interrupted"]


class ResumeRecord(Record):
    """One `sweep --resume` of this run: when, by what command, from what state."""

    session: int = Field(description="records written in this session carry this number")
    started_at: str
    command_line: list[str]
    from_status: RunStatus
    from_reason: str | None = None
    clock_anchor: ClockAnchor
    units_already_complete: int
    torn_bytes_removed: int = Field(
        0, description="an unterminated last JSONL line a crash left, cut before appending")
    servers: dict[str, RuntimeInfo] = Field(
        default_factory=dict,
        description="'LANE/SCENARIO' → the server this session started (new process, same build)")


class ServerFailure(Record):
    """A level (or scenario) whose server crashed, stopped answering or failed every request. The
    run goes on without the lane's higher levels (a server that falls over at N is not asked for
    more than N again); a started server is restarted for what remains below N."""

    lane: str
    scenario: Literal["solo", "together", "fairness", "open"]
    level: int = Field(description="offered concurrency when it failed (0 = not a level: a fairness check)")
    repetition: int
    session: int = 0
    unit: str
    reason: str
    server_log: str | None = Field(None, description="the failed server's log file, in the run directory")
    restarted: bool = Field(False, description="a fresh server was started for the lane's remaining units")
    restarted_server: RuntimeInfo | None = None
    skipped_units: list[str] = Field(default_factory=list,
                                     description="units not run because of this failure")


PlanAction = Literal["measure", "repeat", "remeasure", "resolve", "confirm", "refine", "stop"]


class PlanDecision(Record):
    """One decision of a lane's adaptive sweep (saturation/planner.py), in the order taken: measure
    repetition `repetition` of `level`, or (action "stop", level None) end the lane's sweep. `reason`
    says why, with the figures it rests on; `elapsed_s` is the lane's sweep time (s) when it was taken."""

    action: PlanAction
    level: int | None = None
    repetition: int | None = None
    reason: str
    elapsed_s: float = Field(ge=0)
    session: int = Field(0, ge=0)
    requests: int | None = Field(None, ge=1, description="measured requests of this repetition; None: the "
                                 "lane's own (N × requests_per_stream)")


class RunManifest(Record):
    schema_version: str = MANIFEST_SCHEMA_VERSION
    run_id: str
    command_line: list[str]
    started_at: str
    finished_at: str | None = None
    clock_anchor: ClockAnchor
    status: RunStatus = "running"
    status_reason: str | None = None
    config: RunConfig
    provenance: Provenance | None = None
    completed_units: list[str] = Field(
        default_factory=list, description="ledger: units finished, in order (see satbench.run.resume)")
    refine_levels: dict[str, list[int]] = Field(
        default_factory=dict,
        description="lane → the extra levels --refine chose, fixed when first chosen: "
                    "a resume runs these (one an interrupt cut short again), never a new choice")
    plan: dict[str, list[PlanDecision]] = Field(
        default_factory=dict,
        description="lane → the adaptive sweep's decisions in order: a resume replays them, then plans on")
    resumes: list[ResumeRecord] = Field(default_factory=list)
    server_failures: list[ServerFailure] = Field(default_factory=list)


def write_manifest(run_dir: Path, manifest: RunManifest) -> None:
    write_text_atomic(run_dir / MANIFEST_FILE, manifest.model_dump_json(indent=2) + "\n")


def first_error(exc: ValidationError) -> str:
    """'FIELD.PATH: message' of a validation error's first failure: one short printable line (a key
    the file holds is shown as repr when it is not printable text)."""
    first = exc.errors()[0]
    parts = [str(p) if str(p).isprintable() and str(p) else repr(p) for p in first["loc"]]
    where = ".".join(parts)[:120] or "the top level"
    msg = "".join(c if c.isprintable() else " " for c in first["msg"])
    return f"{where}: {' '.join(msg.split())[:200]}"


def read_manifest(run_dir: Path) -> RunManifest:
    """run.json, its config checked by the type rules alone (RECORDED), not by the caps on new
    input. RunDirError (one line, naming the
    first failing field) when it is missing, not a regular file, larger than MAX_MANIFEST_BYTES,
    unreadable or invalid."""
    from satbench.records.rundir import read_regular_file

    path = run_dir / MANIFEST_FILE
    try:
        present = os.path.lexists(path)
    except (OSError, ValueError) as exc:
        raise RunDirError(f"cannot read {path}: {exc}") from exc
    if not present:
        raise RunDirError(f"{run_dir} is not a satbench run directory (no {MANIFEST_FILE})")
    data = read_regular_file(path, MAX_MANIFEST_BYTES)
    try:
        doc = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # not UTF-8, not JSON, or nested too deep
        raise RunDirError(f"{path} is not a valid run manifest: {exc.__class__.__name__}") from exc
    try:
        return RunManifest.model_validate(doc, context=RECORDED)
    except ValidationError as exc:
        raise RunDirError(f"{path} is not a valid run manifest ({first_error(exc)})") from exc
    except RecursionError as exc:
        raise RunDirError(f"{path} is not a valid run manifest: nested too deep") from exc


def satbench_source() -> tuple[str | None, list[str]]:
    """(git commit of the satbench source tree, '+dirty' when modified; the modified files),
    or (None, []) when satbench is not running from a checkout."""
    src = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=src, capture_output=True, text=True,
                              timeout=5)
        if head.returncode != 0:
            return None, []
        status = subprocess.run(["git", "status", "--porcelain", "--", "."], cwd=src,
                                capture_output=True, text=True, timeout=5)
        changed = sorted(line[3:] for line in status.stdout.splitlines() if line.strip())
        return head.stdout.strip() + ("+dirty" if changed else ""), changed
    except (OSError, subprocess.TimeoutExpired):
        return None, []
