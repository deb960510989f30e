"""Host facts recorded with every run: CPU, cores, RAM, OS, Python, GPUs."""

from __future__ import annotations

import platform
from pathlib import Path

import psutil

from satbench.gpu import NvmlGpus
from satbench.manifest import HostInfo


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe_host(gpus: NvmlGpus | None) -> HostInfo:
    """Host facts plus their stable fingerprint hash."""
    host = HostInfo(
        cpu_model=cpu_model(),
        cores_logical=psutil.cpu_count(logical=True) or 1,
        cores_physical=psutil.cpu_count(logical=False),
        ram_bytes=psutil.virtual_memory().total,
        os=f"{platform.system()} {platform.release()}",
        python=platform.python_version(),
        gpus=gpus.describe() if gpus is not None else [],
    )
    host.fingerprint_sha256 = host.fingerprint()
    return host
