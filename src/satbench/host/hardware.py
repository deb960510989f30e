"""Host facts recorded with every run: CPU, cores, RAM, OS, Python, GPUs."""

from __future__ import annotations

import math
import os
import platform
from pathlib import Path

import psutil

from satbench.host.gpu import NvmlGpus
from satbench.records.manifest import HostInfo


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_signature() -> str | None:
    """'family F model M stepping S' of the first CPU in /proc/cpuinfo (x86); None elsewhere."""
    try:
        first_cpu = Path("/proc/cpuinfo").read_text().split("\n\n")[0]
    except OSError:
        return None
    fields = {k.strip(): v.strip()
              for k, sep, v in (ln.partition(":") for ln in first_cpu.splitlines()) if sep}
    if "cpu family" not in fields:
        return None
    return (f"family {fields['cpu family']} model {fields.get('model', '?')} "
            f"stepping {fields.get('stepping', '?')}")


def cgroup_dir(root: Path = Path("/sys/fs/cgroup")) -> Path:
    """This process's cgroup v2 directory (its "0::" line of /proc/self/cgroup; the root without one)."""
    try:
        rel = next((ln.split(":", 2)[2] for ln in Path("/proc/self/cgroup").read_text().splitlines()
                    if ln.startswith("0::")), "/")
    except OSError:
        rel = "/"
    return root / rel.lstrip("/")


def cgroup_memory_left(root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """Bytes a cgroup v2 memory limit still leaves this process (memory.max − memory.current, as
    under a container's --memory); None without a limit."""
    try:
        group = cgroup_dir(root)
        limit = (group / "memory.max").read_text().strip()
        return None if limit == "max" else int(limit) - int((group / "memory.current").read_text())
    except (OSError, ValueError):
        return None


def cgroup_cpu_limit(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """CPUs a cgroup v2 quota allows this process (cpu.max 'quota period'); None without a quota."""
    try:
        text = (cgroup_dir(root) / "cpu.max").read_text().split()
    except OSError:
        return None
    try:
        return None if len(text) != 2 or text[0] == "max" else int(text[0]) / int(text[1])
    except (ValueError, ZeroDivisionError):
        return None


def usable_cores(logical: int, affinity: set[int] | None = None, quota: float | None = None) -> int:
    """Cores this process (and the server it starts) may use: its CPU affinity (taskset, cpuset),
    capped by a cgroup quota rounded up (docker --cpus 1.5 → 2)."""
    if affinity is None:
        try:
            affinity = os.sched_getaffinity(0)
        except (AttributeError, OSError):
            affinity = set(range(logical))
    n = len(affinity) or logical
    return min(n, math.ceil(quota)) if quota else n


def describe_host(gpus: NvmlGpus | None) -> HostInfo:
    """Host facts plus their stable fingerprint hash."""
    logical = psutil.cpu_count(logical=True) or 1
    host = HostInfo(
        cpu_model=cpu_model(),
        cpu_signature=cpu_signature(),
        cores_logical=logical,
        cores_physical=psutil.cpu_count(logical=False),
        cores_usable=usable_cores(logical, quota=cgroup_cpu_limit()),
        ram_bytes=psutil.virtual_memory().total,
        os=f"{platform.system()} {platform.release()}",
        python=platform.python_version(),
        gpus=gpus.describe() if gpus is not None else [],
    )
    return host.model_copy(update={"fingerprint_sha256": host.fingerprint()})


def ram_available() -> int:
    """RAM the server may still take: psutil's available, capped by what a cgroup v2 memory limit
    leaves (the server inherits satbench's cgroup)."""
    available = int(psutil.virtual_memory().available)
    left = cgroup_memory_left()
    return available if left is None else min(available, left)
