"""Memory per slot of a lane, and how many slots the machine has room for (DESIGN.md §4, memory).

From the buffers llama.cpp printed as the lane's server started (run.json ``runtime.memory``,
see runtimes/memlog.py) and one reading of the memory left right after. RSS and NVML's device
memory, sampled per level, are the other memory figures; they include what the server keeps
besides its cache (the prompt cache, context checkpoints, the allocator's slack).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from satbench.config import Strict
from satbench.manifest import RuntimeInfo, ServerMemory
from satbench.runtimes.memlog import is_gpu_buffer

MEMORY_MARGIN_BYTES = 1 << 30  # left free on the device, as llama.cpp's own --fit-target default (1024 MiB)
CACHE_KINDS = ("kv", "state")


class LaneMemory(Strict):
    """What a lane's server holds per slot, and the slots that fit in the memory left after loading.

    Formula:
      cache_bytes = Σ KV buffers + Σ state buffers (recurrent RS, DeepSeek V4 compressor state)
      cache_bytes_per_slot = cache_bytes ÷ slots, slots = llama.cpp's n_seq_max (else /props total_slots)
      model_bytes = Σ model buffers (the weights, mapped from the file or copied to a device)
      memory_left_bytes = (GPU free, when the cache lies on a GPU; else RAM available − mapped model
                           bytes, whose pages count as available but must stay resident, unless the
                           file is on tmpfs, whose pages available never counted) − 1 GiB margin
      slots_fit = slots + ⌊memory_left_bytes ÷ cache_bytes_per_slot⌋, at the lane's per-slot context
    Invariant: cache_bytes = kv_bytes + state_bytes; slots_fit ≥ slots when memory_left_bytes ≥ 0.
    """

    model_bytes: int
    model_bytes_on_gpu: int
    kv_bytes: int
    state_bytes: int
    cache_bytes: int
    cache_bytes_per_slot: int
    cache_on: Literal["gpu", "host"]
    compute_bytes: int
    slots: int
    per_slot_ctx: int | None
    memory_left_bytes: int | None = Field(description="after loading, less the margin; null when not read")
    memory_left_of: Literal["gpu", "ram"]
    slots_fit: int | None = Field(description="null when the memory left was not read")
    statement: str


def _sum(mem: ServerMemory, kinds: tuple[str, ...], gpu: bool | None = None) -> int:
    return sum(b.bytes for b in mem.buffers
               if b.kind in kinds and (gpu is None or is_gpu_buffer(b.buffer) == gpu))


def size_text(n: int | None) -> str:
    """Bytes for people: "2.09 MiB", "21.63 GiB" (from 1 GiB up), "n/a" for None."""
    if n is None:
        return "n/a"
    return f"{n / 2**20:,.2f} MiB" if abs(n) < 2**30 else f"{n / 2**30:,.2f} GiB"


def lane_memory(runtime: RuntimeInfo) -> LaneMemory | None:
    """The lane's LaneMemory (see its formula); None when the server's buffers were not recorded."""
    mem = runtime.memory
    slots = (mem.n_seq_max if mem is not None else None) or runtime.total_slots
    if mem is None or not slots:
        return None
    kv, state = _sum(mem, ("kv",)), _sum(mem, ("state",))
    cache, on_gpu = kv + state, _sum(mem, CACHE_KINDS, gpu=True)
    per_slot = cache // slots
    gpu = on_gpu * 2 > cache  # where most of it lies: a partial offload keeps the rest in RAM
    if gpu:
        left = None if mem.gpu_free_bytes is None else mem.gpu_free_bytes - MEMORY_MARGIN_BYTES
    else:
        mapped = 0 if mem.model_pages_reclaimable is False else sum(
            b.bytes for b in mem.buffers if b.kind == "model" and b.buffer.endswith("_Mapped"))
        left = (None if mem.ram_available_bytes is None
                else mem.ram_available_bytes - mapped - MEMORY_MARGIN_BYTES)
    fit = None
    if left is not None and per_slot > 0:
        fit = slots + max(left, 0) // per_slot
    where = "GPU memory" if gpu else "RAM"
    ctx = f" at {runtime.per_slot_ctx:,} tokens per slot" if runtime.per_slot_ctx else ""
    said = f"cache {size_text(per_slot)} per slot{ctx} ({size_text(cache)} for {slots} slots, in {where})"
    if fit is not None and left is not None:  # both known, or neither
        said += f"; {size_text(max(left, 0))} of {where} left after loading (less 1 GiB): {fit:,} slots fit"
    else:
        said += f"; the {where} left after loading was not read: slots that fit unknown"
    return LaneMemory(
        model_bytes=_sum(mem, ("model",)), model_bytes_on_gpu=_sum(mem, ("model",), gpu=True), kv_bytes=kv,
        state_bytes=state, cache_bytes=cache, cache_bytes_per_slot=per_slot,
        cache_on="gpu" if gpu else "host",
        compute_bytes=_sum(mem, ("compute",)), slots=slots, per_slot_ctx=runtime.per_slot_ctx,
        memory_left_bytes=left, memory_left_of="gpu" if gpu else "ram", slots_fit=fit, statement=said,
    )
