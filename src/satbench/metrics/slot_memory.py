"""Memory per slot of a lane, and how many slots the machine has room for
(docs/definitions.md#memory-per-slot).

From the buffers llama.cpp printed as the lane's server started (run.json ``runtime.memory``,
see runtimes/memlog.py) and the memory left on the machine, read once the server answered and
again once the lane's levels had run. RSS and NVML's device memory, sampled per level, are the
other memory figures; they include what the server keeps besides its cache (the prompt cache,
context checkpoints, the allocator's slack).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from satbench.records.manifest import RuntimeInfo, ServerMemory
from satbench.records.record import Record
from satbench.server.memlog import is_gpu_buffer

MEMORY_MARGIN_BYTES = 1 << 30  # left free on the device, as llama.cpp's own --fit-target default (1024 MiB)
CACHE_KINDS = ("kv", "state")
Pool = Literal["gpu", "ram"]


def size_text(n: int | None) -> str:
    """Bytes for people: "2.09 MiB", "21.63 GiB" (from 1 GiB up), "n/a" for None."""
    if n is None:
        return "n/a"
    return f"{n / 2**20:,.2f} MiB" if abs(n) < 2**30 else f"{n / 2**30:,.2f} GiB"


MARGIN_TEXT = size_text(MEMORY_MARGIN_BYTES)


class LaneMemory(Record):
    """What a lane's server holds per slot, and the slots that fit in the memory left after loading.

    Formula:
      cache_bytes = Σ KV buffers + Σ state buffers (recurrent RS, DeepSeek V4 compressor state)
      cache_bytes_per_slot = cache_bytes ÷ slots, slots = llama.cpp's n_seq_max (else /props total_slots)
      model_bytes = Σ model buffers (the weights, mapped from the file or copied to a device)
      left(pool) = the lower of the two readings (server started, levels run) of GPU free memory or
                   RAM available − mapped model bytes (pages that count as available but must stay
                   resident; not for a file on tmpfs) − the 1 GiB margin
      slots_fit = slots + min over the pools holding cache of ⌊left(pool) ÷ its cache per slot⌋
                  (≥ 0; below slots when the server leaves less than the margin free)
    Invariant: cache_bytes = kv_bytes + state_bytes. slots_fit is null where extra slots would not
    each need a cache of their own (--kv-unified), on several GPUs (memory per device is not
    attributed), or where the memory left was not read; `statement` says which.
    """

    model_bytes: int
    model_bytes_on_gpu: int
    kv_bytes: int
    state_bytes: int
    cache_bytes: int
    cache_bytes_per_slot: int
    cache_bytes_per_slot_on_gpu: int = Field(0, description="the part of it in GPU memory")
    cache_on: Literal["gpu", "host", "gpu+host"]
    compute_bytes: int
    slots: int
    per_slot_ctx: int | None
    memory_left_bytes: int | None = Field(description="in the pool that limits slots_fit, the lower reading, "
                                          "less the margin; null when not read")
    memory_left_of: Pool | None
    slots_fit: int | None = Field(description="null: see statement")
    statement: str


def _sum(mem: ServerMemory, kinds: tuple[str, ...], gpu: bool | None = None) -> int:
    return sum(b.bytes for b in mem.buffers
               if b.kind in kinds and (gpu is None or is_gpu_buffer(b.buffer) == gpu))


def _lower(*readings: int | None) -> int | None:
    known = [r for r in readings if r is not None]
    return min(known) if known else None


def _left(mem: ServerMemory, pool: Pool) -> int | None:
    """The pool's lower reading less what must stay resident and the margin (see LaneMemory)."""
    if pool == "gpu":
        free = _lower(mem.gpu_free_bytes, mem.gpu_free_end_bytes)
        return None if free is None else free - MEMORY_MARGIN_BYTES
    available = _lower(mem.ram_available_bytes, mem.ram_available_end_bytes)
    mapped = 0 if mem.model_pages_reclaimable is False else sum(
        b.bytes for b in mem.buffers if b.kind == "model" and b.buffer.endswith("_Mapped"))
    return None if available is None else available - mapped - MEMORY_MARGIN_BYTES


def _why_not(mem: ServerMemory, kv_unified: bool, gpu_cache: int) -> str | None:
    """Why slots_fit is not judged, or None."""
    if kv_unified:
        return "--kv-unified: the slots share one cache, so another slot needs no cache of its own"
    devices = {b.buffer for b in mem.buffers if b.kind in CACHE_KINDS and is_gpu_buffer(b.buffer) and b.bytes}
    if gpu_cache and (len(devices) > 1 or (mem.gpu_devices or 1) > 1):
        return "several GPUs: free memory per device is not attributed to the cache on it"
    return None


def lane_memory(runtime: RuntimeInfo, kv_unified: bool = False) -> LaneMemory | None:
    """The lane's LaneMemory (see its formula); None when the server's buffers were not recorded."""
    mem = runtime.memory
    slots = (mem.n_seq_max if mem is not None else None) or runtime.total_slots
    if mem is None or not slots:
        return None
    kv, state = _sum(mem, ("kv",)), _sum(mem, ("state",))
    cache, gpu_cache = kv + state, _sum(mem, CACHE_KINDS, gpu=True)
    pools: tuple[tuple[Pool, int], ...] = (("gpu", gpu_cache), ("ram", cache - gpu_cache))
    per_pool = {pool: part // slots for pool, part in pools if part}
    on: Literal["gpu", "host", "gpu+host"] = ("gpu+host" if len(per_pool) == 2 else
                                              "gpu" if "gpu" in per_pool else "host")
    if kv_unified and mem.n_ctx:
        ctx = f" at {mem.n_ctx // slots:,} tokens per slot on average (one unified cache of {mem.n_ctx:,})"
    else:
        ctx = f" at {runtime.per_slot_ctx:,} tokens per slot" if runtime.per_slot_ctx else ""
    where = {"gpu": "in GPU memory", "host": "in RAM", "gpu+host": "in GPU memory and RAM"}[on]
    said = f"cache {size_text(cache // slots)} per slot{ctx} ({size_text(cache)} for {slots} slots, {where})"
    why = _why_not(mem, kv_unified, gpu_cache)
    fits = {pool: (left, slots + left // per_slot) for pool, per_slot in per_pool.items()
            if (left := _left(mem, pool)) is not None} if why is None else {}
    fit: int | None = None
    pool_of: Pool | None = None
    left = None
    if why is None and per_pool and len(fits) == len(per_pool):
        limiting = min(fits, key=lambda p: fits[p][1])
        pool_of, left, fit = limiting, fits[limiting][0], max(fits[limiting][1], 0)
        name = "GPU memory" if limiting == "gpu" else "RAM"
        end = mem.gpu_free_end_bytes if limiting == "gpu" else mem.ram_available_end_bytes
        when = ("the lower of the readings before and after the levels" if end is not None
                else "read once the server answered")
        said += (f"; {size_text(left)} of {name} left after loading ({when}, less {MARGIN_TEXT}): "
                 f"{fit:,} slots fit")
    else:
        why = why or ("llama.cpp printed no KV or state buffer" if not per_pool
                      else "the memory left after loading was not read")
        said += f"; slots that fit not judged: {why}"
    return LaneMemory(
        model_bytes=_sum(mem, ("model",)), model_bytes_on_gpu=_sum(mem, ("model",), gpu=True), kv_bytes=kv,
        state_bytes=state, cache_bytes=cache, cache_bytes_per_slot=cache // slots,
        cache_bytes_per_slot_on_gpu=per_pool.get("gpu", 0), cache_on=on,
        compute_bytes=_sum(mem, ("compute",)), slots=slots, per_slot_ctx=runtime.per_slot_ctx,
        memory_left_bytes=left, memory_left_of=pool_of, slots_fit=fit, statement=said,
    )
