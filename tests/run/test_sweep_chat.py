"""A whole sweep with `--endpoint chat` against the fake: every request goes to /v1/chat/completions
with a text prompt, its counts come from usage (the template's tokens in the prompt's), TTFT is the
first content chunk, and the endpoint is recorded with the config."""

from __future__ import annotations

import json

from satbench.analysis.results import validate_results_text
from satbench.cli.main import main
from satbench.metrics.latency import first_token_ns
from satbench.records.events import RequestEvent, read_events
from tests.fakes.fake_llama_server import CHAT_TEMPLATE_TOKENS


def test_a_chat_sweep_measures_the_chat_endpoint(fake_server, tmp_path):
    fake = fake_server(n_slots=2, decode_iteration_ms=3.0, prefill_ms_per_token=0.1)
    run_dir = tmp_path / "run"
    assert main(["sweep", "--url", fake.base_url, "--endpoint", "chat", "--concurrency", "1,2",
                 "--requests-per-level", "6", "--repetitions", "1", "--prompt-tokens", "32",
                 "--output-tokens", "8", "-o", str(run_dir)]) == 0
    served = {rec["id"]: rec for rec in fake.stop()}
    events = [e for e in read_events(run_dir) if isinstance(e, RequestEvent)]
    assert len(events) == (1 + 6) + (2 + 6) and {e.request_id for e in events} == set(served)
    # the fake's words tokenize one token each: the message is exactly 32 tokens, the template adds its own
    assert all(e.ok and e.output_tokens == 8 and e.token_count_exact for e in events)
    assert all(e.prompt_tokens == 32 and e.server_prompt_tokens == 32 + CHAT_TEMPLATE_TOKENS for e in events)
    for e in events:
        rec = served[e.request_id]
        assert rec["endpoint"] == "/v1/chat/completions" and rec["prompt_tokens"] == 32 + CHAT_TEMPLATE_TOKENS
        assert len(e.chunks) == len(rec["chunk_ns"])  # one chunk per content chunk, the role chunk none
        assert e.sent_ns < first_token_ns(e) <= e.end_ns
    text = (run_dir / "results.json").read_text()
    validate_results_text(text)
    results, manifest = json.loads(text), json.loads((run_dir / "run.json").read_text())
    assert results["lanes"][0]["workload"]["endpoint"] == "chat"
    assert manifest["config"]["lanes"][0]["workload"]["endpoint"] == "chat"
    assert all(lv["throughput"]["output_tok_per_s"]["value"] > 0 for lv in results["lanes"][0]["levels"])
