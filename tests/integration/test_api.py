"""satbench.api: the CLI's work as functions returning the typed models, and the example script that
uses them (examples/api_sweep.py) against the fake llama.cpp server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from satbench import api
from satbench.analysis.results import ResultsFile
from satbench.config.schema import LaneConfig, RunConfig, RuntimeConfig, WorkloadConfig
from satbench.errors import UserError
from satbench.saturation.recommendations_file import RecommendationsFile

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "api_sweep.py"


def _cfg(url: str) -> RunConfig:
    return RunConfig(lanes=[LaneConfig(name="gw", levels=[1, 2], repetitions=1, requests_per_level=6,
                                       runtime=RuntimeConfig(kind="url", url=url, model=None),
                                       workload=WorkloadConfig(prompt_tokens=16, output_tokens=4))])


def test_sweep_then_read_derive_and_recommend_again(fake_server, tmp_path):
    fake = fake_server(n_slots=2, decode_iteration_ms=2.0)
    run = tmp_path / "run"
    outcome = api.sweep(_cfg(fake.base_url), run)
    assert isinstance(outcome.results, ResultsFile)
    assert isinstance(outcome.recommendations, RecommendationsFile)
    assert [lv.concurrency for lv in outcome.results.lanes[0].levels] == [1, 2]
    assert Path(outcome.report.evidence).exists() and (run / "run.json").exists()
    assert api.load_results(run) == outcome.results
    again = api.analyze(run)
    assert [lv.throughput.output_tok_per_s.value for lv in again.lanes[0].levels] == [
        lv.throughput.output_tok_per_s.value for lv in outcome.results.lanes[0].levels]
    assert api.recommend(run).lanes[0].recommended_concurrency == (
        outcome.recommendations.lanes[0].recommended_concurrency)
    report = api.capability(_cfg(fake.base_url), run / "recommendations.json")
    assert report.lanes[0].lane == "gw" and report.node.node_id


def test_a_refusal_is_a_satbench_error_and_leaves_no_run(tmp_path):
    with pytest.raises(UserError):
        api.sweep(_cfg("http://127.0.0.1:8080/?q=1"), tmp_path / "run")
    assert not (tmp_path / "run").exists()
    with pytest.raises(UserError, match="max-age-days"):
        api.capability(_cfg("http://127.0.0.1:1"), tmp_path / "none.json", max_age_days=0)


def test_the_example_script_sweeps_and_prints_the_answer(fake_server, tmp_path):
    fake = fake_server(n_slots=2, decode_iteration_ms=2.0)
    done = subprocess.run([sys.executable, str(EXAMPLE), fake.base_url, str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "server N=4:" in done.stdout and "server: recommended" in done.stdout
    assert "advertised" in done.stdout and (tmp_path / "run" / "EVIDENCE.md").exists()
