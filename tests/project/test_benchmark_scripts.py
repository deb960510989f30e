"""The benchmark scripts still run against today's library (CI runs no benchmark otherwise: a
changed signature left harness_overhead.py failing unnoticed). Smallest settings; the figures
they print are not judged here, only that each prints its result row. The liveness benchmark waits
out the default liveness bound, so it is marked `slow` (left out by default; `pytest -m slow`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _run(*args: str) -> str:
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120,
                          cwd=BENCH.parent)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_harness_overhead_prints_a_row_per_concurrency():
    out = _run(str(BENCH / "harness_overhead.py"), "--streams", "2", "--seconds", "1")
    rows = [ln.split() for ln in out.splitlines() if ln.strip().startswith("2 ")]
    assert len(rows) == 1 and float(rows[0][2]) > 0  # N, sched tok/s, satbench's tok/s


def test_client_choice_prints_a_row_for_each_client_and_keeps_it(tmp_path):
    kept = tmp_path / "client_choice.txt"
    out = _run(str(BENCH / "client_choice.py"), "--duration", "1", "--warmup", "0.2", "--levels", "2",
               "--clients", "satbench,aiohttp", "--modes", "raw", "--out", str(kept))
    for text in (out, kept.read_text()):
        rows = [ln.split() for ln in text.splitlines() if ln.strip()]
        assert any(r[:3] == ["satbench", "raw", "2"] for r in rows)
        aio = next(r for r in rows if r[:3] == ["aiohttp", "raw", "2"])
        assert aio[-1] == "0"  # errors: one connection per request, as against llama.cpp


def test_synthetic_write_writes_and_deletes_a_tiny_model(tmp_path):
    out = _run(str(BENCH / "synthetic_write.py"), "--arch", "llama", "--size", "tiny", "--dir", str(tmp_path))
    assert "llama tiny" in out and "deleted" in out and not list(tmp_path.iterdir())


def test_synthetic_write_says_so_when_the_directory_is_missing(tmp_path):
    done = subprocess.run([sys.executable, str(BENCH / "synthetic_write.py"), "--dir",
                           str(tmp_path / "none")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "is not a directory" in done.stderr
    assert "Traceback" not in done.stderr


def test_cache_per_slot_prints_llama_cpps_sizes(tmp_path):
    out = _run(str(BENCH / "cache_per_slot.py"), "--contexts", "256,1024", "--models", "llama-tiny",
               "--dir", str(tmp_path))
    row = next(ln.split() for ln in out.splitlines() if ln.startswith("llama-tiny"))
    assert row[1:] == ["0.50", "2.00"]  # 4 layers x (K + V) x 128 x 2 bytes = 2 KiB per token


@pytest.mark.slow  # the default liveness bound (20 s) runs out in it: pytest -m slow
def test_liveness_bound_prints_a_row_with_the_recorded_failure():
    out = _run(str(BENCH / "liveness_bound.py"), "--levels", "1", "--cases", "sigstop")
    rows = [ln.split(None, 4) for ln in out.splitlines() if ln.strip().startswith("sigstop ")]
    assert len(rows) == 1 and rows[0][1] == "1" and rows[0][3] == "4" and "stopped answering" in rows[0][4]


@pytest.mark.slow  # writes and reads a 60 MB lengths file
def test_big_inputs_prints_the_lengths_files_peak_and_its_refusal():
    out = _run(str(BENCH / "big_inputs.py"), "--cases", "lengths")
    row = next(ln.split(None, 3) for ln in out.splitlines() if ln.strip().startswith("lengths "))
    assert float(row[2]) > 0 and "more than 1,000,000 lengths" in row[3]


@pytest.mark.slow  # unpacks and analyzes the committed bundle twice
def test_big_inputs_prints_analyze_and_verify_of_a_grown_bundle():
    out = _run(str(BENCH / "big_inputs.py"), "--cases", "analyze,verify", "--sampler-lines", "3000")
    rows = {ln.split(None, 3)[0]: ln.split(None, 3) for ln in out.splitlines()
            if ln.strip().startswith(("analyze ", "verify "))}
    assert set(rows) == {"analyze", "verify"}
    assert all(float(r[2]) > 0 and r[3].startswith("exit 0") for r in rows.values())
    assert "verify OK" in rows["verify"][3]


def test_http_keepalive_prints_both_connection_policies_and_their_ratio():
    out = _run(str(BENCH / "http_keepalive.py"), "--requests", "30")
    assert "kept-alive" in out and "new connection each" in out and "ratio new/kept" in out


def test_litellm_router_prints_a_row_per_strategy_with_capacity_refusing_nothing():
    out = _run(str(BENCH / "litellm_router.py"), "--loads", "3", "--rounds", "2", "--retries", "0",
               "--strategies", "simple-shuffle,capacity")
    rows = {ln.split()[0]: ln.split() for ln in out.splitlines() if ln.split()[:1] in (["simple-shuffle"],
                                                                                         ["capacity"])}
    assert set(rows) == {"simple-shuffle", "capacity"}
    assert rows["capacity"][3:6] == ["6", "6", "0"]  # requests, ok, refused
