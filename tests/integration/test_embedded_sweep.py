"""End to end on the REAL embedded llama.cpp (xllamacpp) with a tiny synthetic GGUF written here."""

import json
from pathlib import Path

import gguf
import numpy as np
import pytest

from satbench.analysis.analyze import analyze_run
from satbench.analysis.results import render_results, validate_results_text
from satbench.cli.main import main
from satbench.gguf.files import sha256_file
from satbench.gguf.synthetic import write_synthetic_gguf
from satbench.records.events import (
    LevelMark,
    MetricsSample,
    ProcessSample,
    RequestEvent,
    SlotsSample,
    read_events,
    read_samples,
)
from satbench.records.manifest import read_manifest

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("models") / "tiny-llama.gguf"
    write_synthetic_gguf(path, arch="llama", size="tiny", seed=7)
    return path


@pytest.fixture(scope="module")
def run_dir(tiny_model, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "run"
    code = main(["sweep", "--model", str(tiny_model), "--concurrency", "1,2", "--requests-per-level", "6",
                 "--repetitions", "2", "--prompt-tokens", "48", "--output-tokens", "12", "-o", str(out)])
    assert code == 0
    return out


def test_run_directory_holds_every_raw_and_derived_file(run_dir):
    for name in ("run.json", "events.jsonl", "server_samples.jsonl", "server.log", "results.json"):
        assert (run_dir / name).stat().st_size > 0, name


def test_manifest_and_provenance(run_dir, tiny_model):
    m = read_manifest(run_dir)
    assert m.status == "complete"
    p = m.provenance.lanes["default"]
    assert p.model.sha256 == sha256_file(tiny_model, cache=None) and p.model.synthetic is True
    # what the file says it is, read from its header as the model was resolved
    assert (p.model.architecture, p.model.name, p.model.file_type, p.model.context_length) == (
        "llama", "satbench-synthetic-llama-tiny", "F16", 4096)
    assert p.model.parameter_count and p.model.expert_count is None and p.model.expert_used_count is None
    rt = p.runtime
    assert rt.kind == "embedded" and rt.llamacpp and rt.build_info
    assert rt.build_number and rt.build_number > 10000  # from the xllamacpp version (build_info says b0)
    assert rt.backend and "CPU" in rt.backend
    assert rt.base_url.startswith("http://127.0.0.1:")
    assert rt.total_slots == 2  # n_parallel = the highest level
    assert rt.per_slot_ctx >= 48 + 12
    assert p.network.path == "loopback" and p.network.rtt_ms_median > 0
    host = m.provenance.host
    assert host.cores_logical >= 1 and host.ram_bytes > 0 and len(host.fingerprint_sha256) == 64


def test_events_are_complete_exact_and_uncached(run_dir):
    records = read_events(run_dir)
    reqs = [r for r in records if isinstance(r, RequestEvent)]
    marks = [r for r in records if isinstance(r, LevelMark)]
    # per repetition: level 1 → 1 warmup + 6, level 2 → 2 warmups + 6; two repetitions
    assert len(reqs) == 2 * (7 + 8)
    assert len(marks) == 2 * 2 * 2
    assert all(r.ok for r in reqs), [r.error for r in reqs if r.error]
    assert all(r.output_tokens == 12 and len(r.chunks) == 12 for r in reqs)
    assert all(r.timings.prompt_n == 48 and r.timings.cache_n == 0 for r in reqs)
    assert len({r.request_id for r in reqs}) == len(reqs)
    assert {r.slot_id for r in reqs if r.level == 2} == {0, 1}
    # interleaved order: 1,2,1,2
    starts = [(m.level, m.repetition) for m in marks if m.kind == "level_start"]
    assert starts == [(1, 1), (2, 1), (1, 2), (2, 2)]


def test_server_samples_cover_metrics_slots_and_process(run_dir):
    samples = read_samples(run_dir)
    kinds = {type(s) for s in samples}
    assert kinds == {MetricsSample, SlotsSample, ProcessSample}
    good_metrics = [s for s in samples if isinstance(s, MetricsSample) and s.error is None]
    assert "n_decode_total" in good_metrics[-1].values
    assert any(s.rss_bytes for s in samples if isinstance(s, ProcessSample))


def test_results_validate_and_analyze_reproduces_them_byte_for_byte(run_dir):
    text = (run_dir / "results.json").read_text()
    validate_results_text(text)
    assert render_results(analyze_run(run_dir)) == text
    assert main(["analyze", str(run_dir)]) == 0
    assert (run_dir / "results.json").read_text() == text
    res = json.loads(text)
    levels = res["lanes"][0]["levels"]
    assert [lv["concurrency"] for lv in levels] == [1, 2]
    for lv in levels:
        assert lv["throughput"]["output_tok_per_s"]["value"] > 0
        assert lv["throughput"]["output_tok_per_s"]["n"] == 2
        assert lv["latency"]["ttft_ms"]["n"] > 0
        assert lv["occupancy"]["client_in_flight"] == pytest.approx(lv["concurrency"], rel=0.25)
        assert lv["memory"]["peak_rss_bytes"] > 0


def _write_broken(path: Path, *, moe_without_expert_used: bool) -> None:
    arch = "qwen3moe" if moe_without_expert_used else "llama"
    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(128)
    w.add_embedding_length(64)
    w.add_block_count(1)
    w.add_head_count(2)
    w.add_layer_norm_rms_eps(1e-6)
    if moe_without_expert_used:
        w.add_expert_count(4)
    w.add_tokenizer_model("llama")
    w.add_token_list(["<unk>", "<s>", "</s>", "a"])
    w.add_tensor("token_embd.weight", np.zeros((4, 64), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("moe", [False, True], ids=["missing-tensor", "moe-assert"])
def test_startup_failure_surfaces_llamacpp_reason_in_one_line(tmp_path, capsys, moe):
    model = tmp_path / "broken.gguf"
    _write_broken(model, moe_without_expert_used=moe)
    code = main(["sweep", "--model", str(model), "--concurrency", "1", "-o", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert code == 3
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    if moe:  # a GGML_ASSERT aborts the process: the signal, then llama.cpp's assert line
        assert "killed by SIGABRT (signal 6) while loading" in err, err
        assert "expert" in err.lower() or "assert" in err.lower(), err
    else:
        assert "failed to start" in err
        assert "not found" in err or "missing" in err, err
    assert read_manifest(tmp_path / "run").status == "failed"


def test_a_chat_sweep_on_the_real_server_counts_from_usage(tiny_model, tmp_path):
    """`--endpoint chat` on the real server: its template wraps each message (usage.prompt_tokens
    exceeds the message's tokens, and agrees with timings.prompt_n), every answer has exactly the
    tokens asked for, counted over its content deltas."""
    out = tmp_path / "run"
    assert main(["sweep", "--model", str(tiny_model), "--endpoint", "chat", "--concurrency", "1,2",
                 "--requests-per-level", "4", "--repetitions", "1", "--prompt-tokens", "48",
                 "--output-tokens", "8", "-o", str(out)]) == 0
    events = [e for e in read_events(out) if isinstance(e, RequestEvent)]
    assert events and all(e.ok and e.output_tokens == 8 and e.token_count_exact for e in events)
    assert all(e.prompt_tokens == 48 and e.server_prompt_tokens > 48 for e in events)
    assert all(e.timings is not None and e.timings.prompt_n == e.server_prompt_tokens for e in events)
    # a token ending inside a UTF-8 character sends no delta: usage's count is spread over the rest
    assert all(1 <= len(e.chunks) <= 8 and sum(n for _, n in e.chunks) == 8 for e in events)
    assert all(e.sent_ns < e.chunks[0][0] for e in events)
    assert read_manifest(out).config.lanes[0].workload.endpoint == "chat"


def test_a_two_turn_chat_on_the_real_server_hits_the_prompt_cache(tiny_model, tmp_path):
    """`--workload chat:2` on the real server: turn 2 resends turn 1 (system prompt, user message,
    answer) and a new message on the same stream; the server's cache supplies part of it (cache_n > 0),
    and no turn 1 finds anything of its own conversation beyond the shared system prompt."""
    out = tmp_path / "run"
    assert main(["sweep", "--model", str(tiny_model), "--workload", "chat:2", "--system-prompt-tokens", "32",
                 "--concurrency", "1", "--requests-per-level", "4", "--repetitions", "1",
                 "--prompt-tokens", "40", "--output-tokens", "8", "-o", str(out)]) == 0
    measured = [e for e in read_events(out) if isinstance(e, RequestEvent) and e.phase == "measured"]
    assert [(e.conversation, e.turn) for e in measured] == [(0, 1), (0, 2), (1, 1), (1, 2)]
    assert all(e.ok and e.timings is not None and e.timings.cache_n is not None for e in measured)
    first, second = measured[0], measured[1]
    assert second.stream == first.stream and second.prompt_tokens == 32 + 40 + 8 + 40
    assert second.timings.cache_n > 0 and second.timings.cache_n >= first.server_prompt_tokens // 2
    workload = read_manifest(out).config.lanes[0].workload
    assert workload.chat is not None and workload.chat.turns == 2 and workload.endpoint == "chat"
