"""llama.cpp's buffer lines → what a started server holds (runtimes/memlog.py)."""

from __future__ import annotations

from pathlib import Path

from satbench.server.memlog import MIB, StartupBuffers, is_gpu_buffer, parse_buffers, startup_buffers

# as the xllamacpp wheel (b11549) printed them for the synthetic deepseek4 tiny, 2 slots, n_ctx 1024
V4_START = """\
0.00.015.860 I load_tensors:   CPU_Mapped model buffer size =    10.70 MiB
0.00.016.088 I llama_context: n_seq_max             = 2
0.00.016.093 I llama_context: n_ctx                 = 1024
0.00.016.094 I llama_context: n_ctx_seq             = 512
0.00.016.158 I llama_context:        CPU  output buffer size =     0.01 MiB
0.00.016.200 I llama_kv_cache: size =    1.00 MiB (   512 cells,   4 layers,  2/2 seqs), K (f16):    1.00 MiB
0.00.016.238 I llama_kv_cache:        CPU KV buffer size =     1.00 MiB
0.00.016.626 I llama_kv_cache:        CPU KV buffer size =     0.12 MiB
0.00.016.670 I llama_kv_cache:        CPU KV buffer size =     0.12 MiB
0.00.016.714 I llama_kv_cache:        CPU KV buffer size =     0.06 MiB
0.00.016.768 I llama_dsv4_comp_state:        CPU DSV4 csa state buffer size =     0.03 MiB
0.00.016.870 I llama_dsv4_comp_state: hca ratio = 128, state = 128 x 128, layers = 1, size = 0.25 MiB
0.00.016.873 I llama_dsv4_comp_state:        CPU DSV4 hca state buffer size =     0.25 MiB
0.00.016.897 I llama_dsv4_comp_state:        CPU DSV4 lid state buffer size =     0.02 MiB
0.00.021.998 I sched_reserve:        CPU compute buffer size =     8.46 MiB
0.00.031.000 I srv    load_model: initializing, n_slots = 2, n_ctx_slot = 512, kv_unified = 'false'
"""


def _mib(x: float) -> int:
    return round(x * MIB)


def test_every_buffer_line_is_read_once_and_summaries_are_not_counted_again() -> None:
    found = parse_buffers(V4_START)
    buffers, lines = found.buffers, found.lines
    assert (found.n_seq_max, found.n_ctx) == (2, 1024)
    by_kind: dict[str, int] = {}
    for b in buffers:
        by_kind[b.kind] = by_kind.get(b.kind, 0) + b.bytes
    assert by_kind == {"model": _mib(10.70), "output": _mib(0.01),
                       "kv": _mib(1.00) + 2 * _mib(0.12) + _mib(0.06),
                       "state": _mib(0.03) + _mib(0.25) + _mib(0.02), "compute": _mib(8.46)}
    assert [b.buffer for b in buffers] == ["CPU_Mapped"] + ["CPU"] * 9
    assert len(lines) == 12 and all(not ln[0].isdigit() for ln in lines)  # time stamps cut


def test_gpu_buffers_are_told_from_host_ones() -> None:
    text = ("load_tensors:        CUDA0 model buffer size =  2864.00 MiB\n"
            "load_tensors:   CPU_Mapped model buffer size =   501.00 MiB\n"
            "llama_kv_cache:      CUDA0 KV buffer size =  1024.00 MiB\n"
            "sched_reserve:  CUDA_Host compute buffer size =    40.01 MiB\n")
    buffers = parse_buffers(text).buffers
    assert [(b.kind, b.buffer, is_gpu_buffer(b.buffer)) for b in buffers] == [
        ("model", "CUDA0", True), ("model", "CPU_Mapped", False), ("kv", "CUDA0", True),
        ("compute", "CUDA_Host", False)]


def test_only_the_latest_start_of_an_appended_log_is_read(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(V4_START)
    offset = log.stat().st_size
    with log.open("a") as fh:
        fh.write("0.00.001 I llama_kv_cache:        CPU KV buffer size =     2.00 MiB\n")
    assert [(b.kind, b.bytes) for b in startup_buffers(log, offset).buffers] == [("kv", 2 * MIB)]
    assert startup_buffers(tmp_path / "missing.log", 0) == StartupBuffers()
    assert startup_buffers(None, 0).buffers == []
