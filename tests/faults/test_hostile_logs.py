"""A server's log is the server's output: memlog.py reads it without raising, each figure range-checked,
and the read bounded (limits.MAX_STARTUP_LOG_BYTES, MAX_LOG_LINE_CHARS)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from satbench.config.limits import MAX_CTX_TOKENS, MAX_LOG_LINE_CHARS, MAX_SLOTS, MAX_STARTUP_LOG_BYTES
from satbench.server.memlog import MIB, parse_buffers, startup_buffers

GOOD = "0.00.015.860 I load_tensors:   CPU_Mapped model buffer size =    10.70 MiB"


def test_a_malformed_size_is_skipped_and_the_next_line_read():
    log = "\n".join(["load_tensors: CPU model buffer size = 1.2.3 MiB", GOOD])
    found = parse_buffers(log)
    assert [(b.buffer, b.bytes) for b in found.buffers] == [("CPU_Mapped", round(10.70 * MIB))]


def test_a_size_of_400_nines_is_no_overflow():
    found = parse_buffers(f"llama_kv_cache: CPU KV buffer size = {'9' * 400} MiB\n"
                          f"sched_reserve: CPU compute buffer size = {'9' * 400}.5 MiB")
    assert found.buffers == [] and found.lines == []


def test_a_size_beyond_any_machine_is_skipped():
    found = parse_buffers("llama_kv_cache: CPU KV buffer size = 999999999999.5 MiB")
    assert found.buffers == []


def test_counts_with_thousands_of_digits_or_out_of_range_are_unavailable():
    log = "\n".join([f"llama_context: n_ctx = {'7' * 5000}", "llama_context: n_seq_max = " + str(10**30),
                     f"llama_context: n_seq_max = {MAX_SLOTS + 1}", "llama_context: n_ctx = 0"])
    found = parse_buffers(log)
    assert found.n_ctx is None and found.n_seq_max is None and found.lines == []


def test_counts_in_range_are_read_after_bad_ones():
    log = "\n".join([f"llama_context: n_ctx = {MAX_CTX_TOKENS + 1}", "llama_context: n_ctx = 4096",
                     "llama_context: n_seq_max = 0", "llama_context: n_seq_max = 4"])
    found = parse_buffers(log)
    assert (found.n_ctx, found.n_seq_max) == (4096, 4)


def test_an_over_long_line_is_cut_and_the_read_goes_on(tmp_path):
    log = tmp_path / "server.log"
    huge = "x" * (MAX_LOG_LINE_CHARS * 10) + " CPU model buffer size = 5.00 MiB"  # past the cut: not read
    log.write_bytes((huge + "\n" + GOOD + "\n").encode() + b"\xff\xfe bad utf-8\n")
    found = startup_buffers(log, 0)
    assert [b.bytes for b in found.buffers] == [round(10.70 * MIB)]
    assert all(len(line) <= MAX_LOG_LINE_CHARS for line in found.lines)


def test_the_read_stops_at_its_byte_limit(tmp_path):
    log = tmp_path / "server.log"
    filler = b"llama_context: chatter\n" * (MAX_STARTUP_LOG_BYTES // 23 + 10)
    log.write_bytes(filler + (GOOD + "\n").encode())  # the buffer line lies past the limit
    assert startup_buffers(log, 0).buffers == []
    assert startup_buffers(log, len(filler)).buffers != []  # read from where this start began


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(
    st.text(max_size=200),
    st.builds(lambda kind, size: f"x: CPU {kind} buffer size = {size} MiB",
              st.sampled_from(["model", "KV", "RS", "compute", "output", "DSV4 csa state"]),
              st.text(alphabet="0123456789.e+-", max_size=40)),
    st.builds(lambda key, n: f"llama_context: {key} = {n}", st.sampled_from(["n_ctx", "n_seq_max"]),
              st.text(alphabet="0123456789-.", max_size=60)),
), max_size=20))
def test_parse_buffers_never_raises_and_keeps_figures_in_range(lines):
    found = parse_buffers("\n".join(lines))
    assert found.n_ctx is None or 1 <= found.n_ctx <= MAX_CTX_TOKENS
    assert found.n_seq_max is None or 1 <= found.n_seq_max <= MAX_SLOTS
    assert all(0 <= b.bytes <= (1 << 24) * MIB for b in found.buffers)
    assert len(found.lines) <= len(lines)
