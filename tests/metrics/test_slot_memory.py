"""Cache per slot and the slots that fit (metrics/slot_memory.py), on recorded buffer sizes."""

from __future__ import annotations

from collections import namedtuple

import satbench.run.memory as ls
from satbench.metrics.slot_memory import MEMORY_MARGIN_BYTES, lane_memory
from satbench.records.manifest import BufferSize, RuntimeInfo, ServerMemory

MIB, GIB = 1 << 20, 1 << 30


def _runtime(memory: ServerMemory | None, slots: int | None = 4, ctx: int | None = 2048) -> RuntimeInfo:
    return RuntimeInfo(kind="embedded", name="x", llamacpp=True, base_url="http://127.0.0.1:1",
                       total_slots=slots, per_slot_ctx=ctx, memory=memory)


def _cpu(available: int | None = 10 * GIB, **more) -> ServerMemory:
    return ServerMemory(buffers=[
        BufferSize(kind="model", buffer="CPU_Mapped", bytes=500 * MIB),
        BufferSize(kind="kv", buffer="CPU", bytes=30 * MIB),
        BufferSize(kind="kv", buffer="CPU", bytes=2 * MIB),
        BufferSize(kind="state", buffer="CPU", bytes=8 * MIB),
        BufferSize(kind="compute", buffer="CPU", bytes=9 * MIB),
    ], n_seq_max=4, n_ctx=8192, ram_available_bytes=available, **more)


def _gpu(free: int, end: int | None = None, devices: int = 1, host_kv: int = 0) -> ServerMemory:
    buffers = [BufferSize(kind="model", buffer="CUDA0", bytes=3000 * MIB),
               BufferSize(kind="model", buffer="CPU_Mapped", bytes=500 * MIB),
               BufferSize(kind="kv", buffer="CUDA0", bytes=640 * MIB)]
    if host_kv:
        buffers.append(BufferSize(kind="kv", buffer="CPU", bytes=host_kv))
    return ServerMemory(buffers=buffers, n_seq_max=64, ram_available_bytes=100 * GIB, gpu_free_bytes=free,
                        gpu_free_end_bytes=end, gpu_devices=devices)


def test_cache_per_slot_and_slots_that_fit_in_ram() -> None:
    m = lane_memory(_runtime(_cpu()))
    assert m is not None
    assert (m.kv_bytes, m.state_bytes, m.cache_bytes) == (32 * MIB, 8 * MIB, 40 * MIB)
    assert m.cache_bytes_per_slot == 10 * MIB and m.cache_on == "host" and m.memory_left_of == "ram"
    assert m.model_bytes == 500 * MIB and m.model_bytes_on_gpu == 0 and m.compute_bytes == 9 * MIB
    left = 10 * GIB - 500 * MIB - MEMORY_MARGIN_BYTES  # the mapped model must stay resident
    assert m.memory_left_bytes == left
    assert m.slots_fit == 4 + left // (10 * MIB)
    assert "10.00 MiB per slot at 2,048 tokens per slot" in m.statement
    assert f"{m.slots_fit:,} slots fit" in m.statement


def test_the_lower_reading_counts_the_prompt_cache_grown_during_the_levels() -> None:
    grown = lane_memory(_runtime(_cpu(ram_available_end_bytes=6 * GIB)))
    assert grown is not None and grown.memory_left_bytes == 6 * GIB - 500 * MIB - MEMORY_MARGIN_BYTES
    m = lane_memory(_runtime(_gpu(free=11 * GIB, end=9 * GIB), slots=64))
    assert m is not None and m.memory_left_bytes == 8 * GIB


def test_a_gpu_cache_counts_gpu_free_memory() -> None:
    m = lane_memory(_runtime(_gpu(free=11 * GIB), slots=64))
    assert m is not None and m.cache_on == "gpu" and m.memory_left_of == "gpu"
    assert m.model_bytes_on_gpu == 3000 * MIB
    assert m.cache_bytes_per_slot == m.cache_bytes_per_slot_on_gpu == 10 * MIB
    assert m.slots_fit == 64 + (10 * GIB) // (10 * MIB) == 1088


def test_a_partial_offload_is_limited_by_the_tighter_pool() -> None:
    # 640 MiB on the GPU, 64 GiB in RAM for 64 slots: 10 MiB + 1 GiB per slot; RAM is the tighter pool
    m = lane_memory(_runtime(_gpu(free=11 * GIB, host_kv=64 * GIB), slots=64))
    assert m is not None and m.cache_on == "gpu+host" and m.memory_left_of == "ram"
    ram_left = 100 * GIB - 500 * MIB - MEMORY_MARGIN_BYTES
    assert m.slots_fit == 64 + ram_left // GIB < 1088


def test_a_server_that_leaves_less_than_the_margin_fits_fewer_slots_than_it_has() -> None:
    m = lane_memory(_runtime(_gpu(free=MEMORY_MARGIN_BYTES - 100 * MIB), slots=64))
    assert m is not None and m.memory_left_bytes == -100 * MIB
    assert m.slots_fit == 64 - 10  # 100 MiB short of the margin: ten 10-MiB slots too many


def test_slots_that_fit_are_not_judged_where_they_would_mislead() -> None:
    several = lane_memory(_runtime(_gpu(free=11 * GIB, devices=8), slots=64))
    assert several is not None and several.slots_fit is None and "several GPUs" in several.statement
    unified = lane_memory(_runtime(_cpu(), ctx=8192), kv_unified=True)
    assert unified is not None and unified.slots_fit is None and "--kv-unified" in unified.statement
    assert "2,048 tokens per slot on average (one unified cache of 8,192)" in unified.statement
    unread = lane_memory(_runtime(_cpu(available=None)))
    assert unread is not None and unread.slots_fit is None and "was not read" in unread.statement


def test_unknown_memory() -> None:
    assert lane_memory(_runtime(None)) is None
    assert lane_memory(_runtime(_cpu().model_copy(update={"n_seq_max": None}), slots=None)) is None


def test_a_model_on_tmpfs_is_not_taken_from_the_ram_left_twice() -> None:
    on_disk = lane_memory(_runtime(_cpu()))
    on_shm = lane_memory(_runtime(_cpu(model_pages_reclaimable=False)))
    assert on_disk is not None and on_shm is not None
    # a file on disk: its mapped pages count as available and must stay resident; on tmpfs they never counted
    assert on_shm.memory_left_bytes == 10 * GIB - MEMORY_MARGIN_BYTES
    assert on_disk.memory_left_bytes == on_shm.memory_left_bytes - 500 * MIB


def test_which_files_are_page_cache(monkeypatch) -> None:
    Part = namedtuple("Part", "mountpoint fstype")
    mounts = [Part("/", "ext4"), Part("/dev/shm", "tmpfs"), Part("/mnt/r", "ramfs")]
    monkeypatch.setattr(ls.psutil, "disk_partitions", lambda all=False: mounts)
    assert ls.page_cache_backed("/data/m.gguf") is True
    assert ls.page_cache_backed("/dev/shm/m.gguf") is False and ls.page_cache_backed("/mnt/r/m.gguf") is False
    assert ls.page_cache_backed("/dev/shmx/m.gguf") is True  # a sibling of the mount, not inside it
    assert ls.page_cache_backed(None) is None


def test_a_cgroup_memory_limit_caps_the_ram_available(monkeypatch, tmp_path) -> None:
    import satbench.host.hardware as hw

    (tmp_path / "memory.max").write_text(str(3 * GIB))
    (tmp_path / "memory.current").write_text(str(2 * GIB))
    monkeypatch.setattr(hw, "cgroup_dir", lambda root=None: tmp_path)
    assert hw.cgroup_memory_left() == GIB
    assert ls.ram_available() == min(GIB, ls.psutil.virtual_memory().available)
    (tmp_path / "memory.max").write_text("max\n")
    assert hw.cgroup_memory_left() is None
