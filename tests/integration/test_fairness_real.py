"""The six checks on the REAL embedded llama.cpp (tiny synthetic model), after a sweep.

A tiny model decodes in ~0.3 ms per token, below what verdicts can resolve, so this test
checks the pipeline and the evidence, not pass/fail; the fakes prove every check can fail."""

import json

import pytest

from satbench.analysis.analyze import analyze_run
from satbench.analysis.results import render_results
from satbench.cli.main import main
from satbench.gguf.synthetic import write_synthetic_gguf
from satbench.pipeline import verify
from satbench.records.events import RequestEvent, read_events
from satbench.records.manifest import read_manifest

pytestmark = pytest.mark.integration


def test_sweep_with_fairness_on_real_llamacpp(tmp_path):
    model = tmp_path / "tiny.gguf"
    write_synthetic_gguf(model, "llama", "tiny", 3)
    out = tmp_path / "run"
    code = main(["sweep", "--model", str(model), "--concurrency", "1,2", "--repetitions", "1",
                 "--requests-per-level", "6", "--prompt-tokens", "48", "--output-tokens", "12",
                 "--with-fairness", "-o", str(out)])
    assert code in (0, 6)  # 6 = some check failed, which is a finding, not an error
    verdicts = json.loads((out / "verdicts.json").read_text())["lanes"][0]["verdicts"]
    assert [v["check"] for v in verdicts] == ["F1", "F2", "F3", "S1", "S2", "S3"]
    for v in verdicts:
        assert v["verdict"] in ("pass", "fail", "marginal", "inconclusive")
        assert (v["reason"] if v["verdict"] == "inconclusive" else v["derivation"] and v["statistics"])
    prov = read_manifest(out).provenance.lanes["default"]
    assert prov.fairness_runtime is not None and prov.fairness_runtime.pid != prov.runtime.pid
    # the fairness server got room for the long S1 prompt (≥ 1.5 × n_batch 2048, capped by the model)
    assert prov.fairness_runtime.per_slot_ctx >= 3072
    events = [e for e in read_events(out) if isinstance(e, RequestEvent) and e.scenario == "fairness"]
    assert {e.check for e in events} == {"CAL", "F1", "F2", "F3", "S1", "S2", "S3"}
    assert all(e.ok for e in events), [e.error for e in events if e.error]
    assert render_results(analyze_run(out)) == (out / "results.json").read_text()
    # the evidence bundle of a real run: every plot kind, S1's starvation plot included, and it verifies
    plots = sorted(p.name for p in (out / "plots").iterdir())
    kinds = ("latency", "occupancy", "starvation", "throughput", "timeline")
    assert plots == [f"default-{k}.png" for k in kinds]
    evidence = (out / "EVIDENCE.md").read_text()
    assert "### Fairness and starvation (default)" in evidence and "SYNTHETIC" in evidence
    assert f"`{prov.runtime.build_number}`" in evidence or f"b{prov.runtime.build_number}" in evidence
    assert verify(out).ok
