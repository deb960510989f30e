"""A lane's memory as its server starts and after its levels: the buffers llama.cpp printed at a probe
start, and the RAM and GPU memory left on this machine (host/hardware, NVML)."""

from __future__ import annotations

import os

import psutil

from satbench.host.gpu import NvmlGpus
from satbench.host.hardware import ram_available
from satbench.records.manifest import ServerMemory
from satbench.server.memlog import StartupBuffers


def started_memory(found: StartupBuffers, gpus: NvmlGpus | None,
                   model_path: str | None = None) -> ServerMemory:
    """The buffers a probe start printed (probe_buffers) and the memory left on this machine now:
    call it once the measured server, which allocates the same, answers."""
    return ServerMemory(buffers=found.buffers, n_seq_max=found.n_seq_max, n_ctx=found.n_ctx,
                        log_lines=found.lines, ram_available_bytes=ram_available(),
                        gpu_free_bytes=_gpu_free(gpus),
                        gpu_devices=gpus.count if gpus is not None else None,
                        model_pages_reclaimable=page_cache_backed(model_path))


def memory_at_end(memory: ServerMemory, gpus: NvmlGpus | None) -> ServerMemory:
    """`memory` with the memory left read again, once the lane's levels have run."""
    return memory.model_copy(update={"ram_available_end_bytes": ram_available(),
                                     "gpu_free_end_bytes": _gpu_free(gpus)})


def _gpu_free(gpus: NvmlGpus | None) -> int | None:
    try:
        return gpus.memory_free_bytes() if gpus is not None else None
    except Exception:  # an NVML failure leaves the figure unknown, like every GPU figure
        return None


def page_cache_backed(path: str | None) -> bool | None:
    """Whether a file's pages, once mapped, are page cache that RAM "available" counts: a file on a
    disk's filesystem; not on tmpfs or ramfs (/dev/shm), whose pages are used memory. None: unknown."""
    if path is None:
        return None
    try:
        real = os.path.realpath(path)
        mounts = [m for m in psutil.disk_partitions(all=True)
                  if real == m.mountpoint or real.startswith(m.mountpoint.rstrip("/") + "/")]
    except OSError:
        return None
    if not mounts:
        return None
    return max(mounts, key=lambda m: len(m.mountpoint)).fstype not in ("tmpfs", "ramfs")
