"""The DeepSeek V4 lane on the REAL embedded llama.cpp: a tiny synthetic deepseek4 swept end to end,
and the cache per slot held against the sizes llama.cpp itself prints, at two context lengths."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from satbench.cli.main import main
from satbench.config.schema import ServerParams
from satbench.gguf.synthetic import write_synthetic_gguf
from satbench.records.manifest import ServerMemory, read_manifest
from satbench.run.memory import started_memory
from satbench.server.embedded import EmbeddedRuntime
from satbench.server.memlog import LOG_VERBOSITY, startup_buffers

pytestmark = pytest.mark.integration
MIB = 1 << 20


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("v4models")
    return {arch: write_synthetic_gguf(tmp / f"{arch}.gguf", arch=arch, size="tiny", seed=2).path
            for arch in ("llama", "deepseek4")}


@pytest.fixture(scope="module")
def v4_run(models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("v4run") / "run"
    assert main(["sweep", "--model", str(models["deepseek4"]), "--concurrency", "1,2",
                 "--requests-per-level", "6", "--repetitions", "1", "--prompt-tokens", "48",
                 "--output-tokens", "12", "-o", str(out)]) == 0
    return out


def _started(model: Path, n_parallel: int, n_ctx: int, log: Path) -> ServerMemory:
    rt = EmbeddedRuntime(str(model), ServerParams(n_threads=1), n_parallel, n_ctx, log,
                         verbosity=LOG_VERBOSITY)
    rt.start()
    try:
        found = startup_buffers(rt.log_path, rt.log_offset)
    finally:
        rt.stop()
    return started_memory(found, None)


def _printed_totals(log: Path) -> float:
    """llama.cpp's own per-cache totals ("llama_kv_cache: size = … MiB", the DSV4 states' "size = …
    MiB" summaries), which satbench does not read: a second printed figure for the same memory."""
    text = log.read_text()
    kv = [float(m) for m in re.findall(r"llama_kv_cache: size =\s*([\d.]+) MiB", text)]
    summary = r"llama_dsv4_comp_state: \w+ ratio = .* size =\s*([\d.]+) MiB"
    states = [float(m) for m in re.findall(summary, text)]
    return sum(kv) + sum(states)


def _cache(mem: ServerMemory) -> int:
    return sum(b.bytes for b in mem.buffers if b.kind in ("kv", "state"))


def test_dense_cache_per_slot_is_the_kv_formula_at_two_contexts(
        models: dict[str, Path], tmp_path: Path) -> None:
    # llama tiny: 4 layers, 2 KV heads of 64, F16 K and V: 4 x 2 x 128 x 2 bytes = 2 KiB per token
    for n_ctx in (1024, 4096):
        log = tmp_path / f"llama-{n_ctx}.log"
        mem = _started(models["llama"], 2, n_ctx, log)
        assert (mem.n_seq_max, mem.n_ctx) == (2, n_ctx)
        assert _cache(mem) == n_ctx * 2048 == round(_printed_totals(log) * MIB)
        assert mem.ram_available_bytes and any(b.kind == "model" for b in mem.buffers)


def test_v4_cache_matches_llama_cpps_totals_and_hardly_grows_with_context(
        models: dict[str, Path], tmp_path: Path) -> None:
    caches = {}
    for n_ctx in (1024, 4096):
        log = tmp_path / f"v4-{n_ctx}.log"
        mem = _started(models["deepseek4"], 2, n_ctx, log)
        rounding = 0.011 * MIB * len(mem.buffers)  # each line printed to 2 decimals of MiB
        assert abs(_cache(mem) - _printed_totals(log) * MIB) <= rounding
        assert any(b.kind == "state" for b in mem.buffers)  # the compressors' state
        caches[n_ctx] = _cache(mem)
    assert caches[1024] < caches[4096] < 2 * caches[1024]  # 4x the context, well under 2x the cache


def test_the_v4_lane_sweeps_and_records_its_memory(v4_run: Path) -> None:
    m = read_manifest(v4_run)
    rt = m.provenance.lanes["default"].runtime  # type: ignore[union-attr]
    assert m.status == "complete" and rt.memory is not None and rt.memory.ram_available_end_bytes
    # read from a probe start at verbosity 4; the measured server logs at llama.cpp's default
    assert "--verbosity" not in rt.server_args and "buffer size" not in (v4_run / "server.log").read_text()
    assert "KV buffer size" in (v4_run / "server-default-memory.log").read_text()
    model = m.provenance.lanes["default"].model  # type: ignore[union-attr]
    assert model.synthetic and model.architecture == "deepseek4"
    assert (model.expert_count, model.expert_used_count, model.context_length) == (8, 2, 1_048_576)
    results = json.loads((v4_run / "results.json").read_text())
    lane = results["lanes"][0]
    assert [lv["concurrency"] for lv in lane["levels"]] == [1, 2]
    assert all(lv["throughput"]["output_tok_per_s"]["value"] > 0 for lv in lane["levels"])
    mem = lane["memory"]
    assert mem["slots"] == 2 and mem["state_bytes"] > 0
    assert mem["cache_bytes"] == mem["kv_bytes"] + mem["state_bytes"]
    assert mem["cache_bytes_per_slot"] == mem["cache_bytes"] // 2 and mem["slots_fit"] > 2
    rec = json.loads((v4_run / "recommendations.json").read_text())["lanes"][0]
    assert rec["memory_cap"] == mem["slots_fit"] and rec["recommended_concurrency"] in (1, 2)
    assert lane["model"]["architecture"] == rec["model"]["architecture"] == "deepseek4"
    evidence = (v4_run / "EVIDENCE.md").read_text()
    assert "cache per slot" in evidence.lower() and "deepseek4" in evidence
    row = "| default | deepseek4 (DeepSeek V4) — SYNTHETIC weights | satbench-synthetic-deepseek4-tiny |"
    assert row in evidence
