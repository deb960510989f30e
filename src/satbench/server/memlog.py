"""What a llama.cpp server allocated as it started, read from its own log.

llama.cpp prints one line per backend buffer while it loads, passed on by its server only at log
verbosity >= ``LOG_VERBOSITY`` (at which it also logs its prompt cache on every request, so
satbench reads these from a start of its own, the memory probe):

- ``load_tensors:   CPU_Mapped model buffer size =    93.74 MiB`` (weights),
- ``llama_kv_cache:        CPU KV buffer size =     3.00 MiB`` (each KV cache; there may be several),
- ``llama_memory_recurrent:   CPU RS buffer size = …`` and
  ``llama_dsv4_comp_state:   CPU DSV4 csa state buffer size = …`` (recurrent and compressor state),
- ``sched_reserve:   CPU compute buffer size = …`` and ``llama_context:   CPU  output buffer size = …``,

and ``llama_context: n_seq_max = 4`` / ``n_ctx = 4096`` for the cache's shape. Only the part of
a log written by one start is read (a log file that already existed is appended to).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from satbench.config.limits import (
    MAX_CTX_TOKENS,
    MAX_LOG_LINE_CHARS,
    MAX_SLOTS,
    MAX_STARTUP_LOG_BYTES,
    checked_int,
)
from satbench.errors import ParseError
from satbench.records.manifest import BufferKind, BufferSize

LOG_VERBOSITY = 4  # llama.cpp's "trace" level: the lowest at which libllama's buffer lines reach the log
MIB = 1 << 20
_LINE_BYTES = 4 * MAX_LOG_LINE_CHARS  # a line's bytes read at most (a UTF-8 character is up to 4)
MAX_BUFFER_MIB = 1 << 24  # one buffer: 16 TiB is beyond any machine; a larger figure is not a size

# The log is the server's output: each figure has a bounded count of digits, so no line can ask
# for a huge integer or a float overflow; a figure out of range leaves the line unread.
_MIB_FIGURE = r"(\d{1,12}(?:\.\d{1,6})?) MiB\b"
_STAMP = re.compile(r"^[\d.]{1,32}\s+[A-Z]\s+")
_BUFFERS: list[tuple[BufferKind, re.Pattern[str]]] = [
    ("model", re.compile(r"(\S{1,64}) model buffer size\s*=\s*" + _MIB_FIGURE)),
    ("kv", re.compile(r"(\S{1,64}) KV buffer size\s*=\s*" + _MIB_FIGURE)),
    ("state", re.compile(r"(\S{1,64}) RS buffer size\s*=\s*" + _MIB_FIGURE)),
    ("state", re.compile(r"(\S{1,64}) DSV4 \w{1,64} state buffer size\s*=\s*" + _MIB_FIGURE)),
    ("compute", re.compile(r"(\S{1,64}) compute buffer size\s*=\s*" + _MIB_FIGURE)),
    ("output", re.compile(r"(\S{1,64})\s+output buffer size\s*=\s*" + _MIB_FIGURE)),
]
GPU_DEVICE = re.compile(r"^(CUDA|ROCm|HIP|Vulkan|SYCL|MUSA|CANN|Metal|MTL|OpenCL)", re.IGNORECASE)


def gpu_device_count(backend: str) -> int:
    """GPU devices a server's backend string lists ("CUDA0: NVIDIA H200; CUDA1: …" from
    llama-server --list-devices, or the embedded server's device list; ';' or ',' separated)."""
    return sum(1 for d in re.split(r"[;,]", backend) if GPU_DEVICE.match(d.strip()))


def is_gpu_buffer(name: str) -> bool:
    """A buffer in a GPU's own memory ("CUDA0"), not in host memory ("CPU", "CPU_Mapped", the
    pinned "CUDA_Host")."""
    return bool(GPU_DEVICE.match(name)) and not name.endswith("_Host")


_N_SEQ = re.compile(r"llama_context: n_seq_max\s*=\s*(\d{1,12})\b")
_N_CTX = re.compile(r"llama_context: n_ctx\s*=\s*(\d{1,12})\b")


@dataclass(frozen=True)
class StartupBuffers:
    """What one start of a server printed: its buffers in log order, its cache's shape, and the lines
    they came from (time stamp cut)."""

    buffers: list[BufferSize] = field(default_factory=list)
    n_seq_max: int | None = None
    n_ctx: int | None = None
    lines: list[str] = field(default_factory=list)


def _buffer(line: str) -> BufferSize | None:
    """The buffer a line names, or None (no buffer line, or a size outside 0..MAX_BUFFER_MIB MiB)."""
    for kind, pattern in _BUFFERS:
        m = pattern.search(line)
        if m:
            mib = float(m[2])  # at most 12 + 6 digits: always a finite float
            if not 0.0 <= mib <= MAX_BUFFER_MIB:
                return None
            return BufferSize(kind=kind, buffer=m[1], bytes=round(mib * MIB))
    return None


def _count(pattern: re.Pattern[str], line: str, lo: int, hi: int, what: str) -> int | None:
    """The integer `pattern` finds in `line` when it is in lo..hi (limits.checked_int), else None."""
    m = pattern.search(line)
    if m is None:
        return None
    try:
        return checked_int(int(m[1]), lo, hi, what)
    except ParseError:
        return None


def parse_buffers(text: str) -> StartupBuffers:
    """The buffer lines of `text` (a log), and llama_context's n_seq_max (1..MAX_SLOTS) and n_ctx
    (1..MAX_CTX_TOKENS). The log is what the server printed: each line is cut to MAX_LOG_LINE_CHARS,
    a figure with too many digits or out of range leaves its line unread (that figure unavailable),
    and nothing in the text raises."""
    buffers: list[BufferSize] = []
    n_seq = n_ctx = None
    lines: list[str] = []
    for raw in text.splitlines():
        line = _STAMP.sub("", raw[:MAX_LOG_LINE_CHARS].strip())
        try:
            found = _buffer(line)
        except (ValueError, OverflowError):  # never with the patterns above; a line stays one line
            found = None
        if found is not None:
            buffers.append(found)
            lines.append(line)
        elif n_seq is None and (n := _count(_N_SEQ, line, 1, MAX_SLOTS, "n_seq_max")) is not None:
            n_seq = n
            lines.append(line)
        elif n_ctx is None and (n := _count(_N_CTX, line, 1, MAX_CTX_TOKENS, "n_ctx")) is not None:
            n_ctx = n
            lines.append(line)
    return StartupBuffers(buffers, n_seq, n_ctx, lines)


def read_log_lines(log_path: Path, offset: int) -> str:
    """What the server wrote to `log_path` from byte `offset` on: at most MAX_STARTUP_LOG_BYTES, read
    line by line, each line at most MAX_LOG_LINE_CHARS (+ its rest skipped), bad UTF-8 replaced."""
    out: list[str] = []
    left = MAX_STARTUP_LOG_BYTES
    with open(log_path, "rb") as fh:
        fh.seek(offset)
        while left > 0:
            raw = fh.readline(min(left, _LINE_BYTES))
            if not raw:
                break
            left -= len(raw)
            while not raw.endswith(b"\n") and left > 0:  # an over-long line: its rest is skipped
                rest = fh.readline(min(left, _LINE_BYTES))
                left -= len(rest)
                if not rest or rest.endswith(b"\n"):
                    break
            out.append(raw.decode("utf-8", errors="replace").rstrip("\r\n")[:MAX_LOG_LINE_CHARS])
    return "\n".join(out)


def startup_buffers(log_path: Path | None, offset: int) -> StartupBuffers:
    """parse_buffers over what the server wrote to `log_path` from byte `offset` on (this start),
    read within MAX_STARTUP_LOG_BYTES (read_log_lines); an unreadable log has no figures."""
    if log_path is None:
        return StartupBuffers()
    try:
        text = read_log_lines(log_path, offset)
    except OSError:
        return StartupBuffers()
    return parse_buffers(text)
