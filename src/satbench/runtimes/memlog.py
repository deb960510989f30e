"""What a llama.cpp server allocated as it started, read from its own log.

llama.cpp prints one line per backend buffer while it loads (libllama's INFO lines, which its
server passes on only at log verbosity >= 4, ``LOG_VERBOSITY``; at that level it also lists its
whole prompt cache on every request, a log that grows with the square of the requests served, so
satbench reads them from a start of its own, the memory probe, and measures a server at the
default verbosity):

- ``load_tensors:   CPU_Mapped model buffer size =    93.74 MiB`` (weights),
- ``llama_kv_cache:        CPU KV buffer size =     3.00 MiB`` (each KV cache: a model with sliding
  window attention or DeepSeek V4's compressed attention has several),
- ``llama_memory_recurrent:   CPU RS buffer size = …`` and
  ``llama_dsv4_comp_state:   CPU DSV4 csa state buffer size = …`` (recurrent and compressor state),
- ``sched_reserve:   CPU compute buffer size = …`` and ``llama_context:   CPU  output buffer size = …``,

and ``llama_context: n_seq_max = 4`` / ``n_ctx = 4096`` for the cache's shape. Nothing else
reports these sizes: ``/props`` and ``/metrics`` do not. Only the part of a log written by one
start is read (a log file that already existed is appended to).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from satbench.manifest import BufferKind, BufferSize

LOG_VERBOSITY = 4  # llama.cpp's "trace" level: the lowest at which libllama's buffer lines reach the log
MIB = 1 << 20
_MAX_STARTUP_BYTES = 4 << 20  # a start logs a few hundred lines; more is a server already at work

_STAMP = re.compile(r"^[\d.]+\s+[A-Z]\s+")
_BUFFERS: list[tuple[BufferKind, re.Pattern[str]]] = [
    ("model", re.compile(r"(\S+) model buffer size\s*=\s*([\d.]+) MiB")),
    ("kv", re.compile(r"(\S+) KV buffer size\s*=\s*([\d.]+) MiB")),
    ("state", re.compile(r"(\S+) RS buffer size\s*=\s*([\d.]+) MiB")),
    ("state", re.compile(r"(\S+) DSV4 \w+ state buffer size\s*=\s*([\d.]+) MiB")),
    ("compute", re.compile(r"(\S+) compute buffer size\s*=\s*([\d.]+) MiB")),
    ("output", re.compile(r"(\S+)\s+output buffer size\s*=\s*([\d.]+) MiB")),
]
GPU_DEVICE = re.compile(r"^(CUDA|ROCm|HIP|Vulkan|SYCL|MUSA|CANN|Metal|MTL|OpenCL)", re.IGNORECASE)


def is_gpu_buffer(name: str) -> bool:
    """A buffer in a GPU's own memory ("CUDA0"), not in host memory ("CPU", "CPU_Mapped", the
    pinned "CUDA_Host")."""
    return bool(GPU_DEVICE.match(name)) and not name.endswith("_Host")


_N_SEQ = re.compile(r"llama_context: n_seq_max\s*=\s*(\d+)")
_N_CTX = re.compile(r"llama_context: n_ctx\s*=\s*(\d+)")


@dataclass(frozen=True)
class StartupBuffers:
    """What one start of a server printed: its buffers in log order, its cache's shape, and the lines
    they came from (time stamp cut)."""

    buffers: list[BufferSize] = field(default_factory=list)
    n_seq_max: int | None = None
    n_ctx: int | None = None
    lines: list[str] = field(default_factory=list)


def parse_buffers(text: str) -> StartupBuffers:
    """The buffer lines of `text` (a log), and llama_context's n_seq_max and n_ctx."""
    buffers: list[BufferSize] = []
    n_seq = n_ctx = None
    lines: list[str] = []
    for raw in text.splitlines():
        line = _STAMP.sub("", raw.strip())
        for kind, pattern in _BUFFERS:
            m = pattern.search(line)
            if m:
                buffers.append(BufferSize(kind=kind, buffer=m[1], bytes=round(float(m[2]) * MIB)))
                lines.append(line)
                break
        else:
            if (m := _N_SEQ.search(line)) and n_seq is None:
                n_seq = int(m[1])
                lines.append(line)
            elif (m := _N_CTX.search(line)) and n_ctx is None:
                n_ctx = int(m[1])
                lines.append(line)
    return StartupBuffers(buffers, n_seq, n_ctx, lines)


def startup_buffers(log_path: Path | None, offset: int) -> StartupBuffers:
    """parse_buffers over what the server wrote to `log_path` from byte `offset` on (this start)."""
    if log_path is None:
        return StartupBuffers()
    try:
        with open(log_path, "rb") as fh:
            fh.seek(offset)
            text = fh.read(_MAX_STARTUP_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return StartupBuffers()
    return parse_buffers(text)
