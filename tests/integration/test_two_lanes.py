"""Two lanes (a dense llama and a DeepSeek-style MoE, both tiny and synthetic) on the REAL
embedded llama.cpp, alone and together, end to end through a lane file."""

import json
from pathlib import Path

import pytest

from satbench.analysis.analyze import analyze_run
from satbench.analysis.results import RESULTS_SCHEMA_VERSION, render_results, validate_results_text
from satbench.cli.main import main
from satbench.records.events import LevelMark, RequestEvent, read_events, read_samples
from satbench.records.manifest import read_manifest

pytestmark = pytest.mark.integration

LANES = """\
[[lanes]]
name = "dense"
model = "synthetic:llama-tiny"
model_dir = "{models}"
concurrency = [1, 2]
prompt_tokens = 48
output_tokens = 12
requests_per_level = 6
repetitions = 1
slo = {{ p95_ttft_ms = 500, p95_tpot_ms = 50 }}

[[lanes]]
name = "moe"
model = "synthetic:deepseek2-tiny"
model_dir = "{models}"
concurrency = [1, 2]
prompt_tokens = 48
output_tokens = 12
requests_per_level = 6
repetitions = 1
"""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("lanes")
    lanes = tmp / "lanes.toml"
    lanes.write_text(LANES.format(models=tmp / "models"))
    out = tmp / "run"
    assert main(["sweep", "--lanes", str(lanes), "--together", "-o", str(out)]) == 0
    return out


def test_each_lane_had_its_own_server_and_provenance(run_dir):
    m = read_manifest(run_dir)
    assert m.status == "complete" and m.config.together
    dense, moe = m.provenance.lanes["dense"], m.provenance.lanes["moe"]
    assert dense.model.synthetic and moe.model.synthetic
    assert dense.model.sha256 != moe.model.sha256
    assert dense.runtime.pid != moe.runtime.pid
    assert dense.together_runtime is not None
    assert dense.together_runtime.pid not in (dense.runtime.pid, moe.runtime.pid)
    for name in ("server-dense.log", "server-moe.log", "server-dense-together.log",
                 "server-moe-together.log"):
        assert (run_dir / name).stat().st_size > 0, name
    assert "deepseek2" in (run_dir / "server-moe.log").read_text()


def test_events_are_keyed_by_lane_and_scenario(run_dir):
    records = read_events(run_dir)
    reqs = [r for r in records if isinstance(r, RequestEvent)]
    for lane in ("dense", "moe"):
        for scenario in ("solo", "together"):
            mine = [r for r in reqs if r.lane == lane and r.scenario == scenario and r.phase == "measured"]
            assert len(mine) == 12 and all(r.ok and r.output_tokens == 12 for r in mine), (lane, scenario)
    marks = [r for r in records
             if isinstance(r, LevelMark) and r.scenario == "together" and r.kind == "level_start"]
    # lockstep: both lanes start level 1, then both start level 2
    assert [m.level for m in marks] == [1, 1, 2, 2]
    samples = read_samples(run_dir)
    assert {(s.lane, s.scenario) for s in samples} == {("dense", "solo"), ("moe", "solo"),
                                                        ("dense", "together"), ("moe", "together")}


def test_results_have_one_section_per_lane_with_interference(run_dir):
    text = (run_dir / "results.json").read_text()
    validate_results_text(text)
    assert render_results(analyze_run(run_dir)) == text
    res = json.loads(text)
    assert res["schema_version"] == RESULTS_SCHEMA_VERSION
    by_lane = {lane["lane"]: lane for lane in res["lanes"]}
    assert set(by_lane) == {"dense", "moe"}
    fp = res["provenance"]["host"]["fingerprint_sha256"]
    for lane in by_lane.values():
        assert lane["hardware"]["fingerprint_sha256"] == fp
        assert lane["runtime"]["build_number"] and "CPU" in lane["runtime"]["backend"]
        assert [lv["concurrency"] for lv in lane["levels"]] == [1, 2]
        assert [lv["concurrency"] for lv in lane["together_levels"]] == [1, 2]
        assert [row["concurrency"] for row in lane["interference"]] == [1, 2]
        for lv in lane["levels"] + lane["together_levels"]:
            assert lv["memory"]["peak_rss_bytes"] > 0
            assert lv["throughput"]["output_tok_per_s"]["value"] > 0
        for row in lane["interference"]:
            assert row["output_tok_per_s"]["value"] > 0
    assert by_lane["dense"]["slo"] == {"p95_ttft_ms": 500.0, "p95_tpot_ms": 50.0, "p95_e2e_ms": None}
    assert by_lane["moe"]["slo"] is None


def test_the_real_run_has_a_verified_bundle_with_both_lanes_and_the_together_series(run_dir):
    from satbench.pipeline import verify

    plots = sorted(p.name for p in (run_dir / "plots").iterdir())
    assert plots == sorted(f"{lane}-{k}.png" for lane in ("dense", "moe")
                           for k in ("latency", "occupancy", "throughput", "timeline"))
    evidence = (run_dir / "EVIDENCE.md").read_text()
    assert "*dense, together with the run's other lanes*" in evidence
    assert "together ÷ alone" in evidence
    rows = (run_dir / "results.csv").read_text().splitlines()
    assert len(rows) == 1 + 2 * 2 * 2  # header + 2 lanes × 2 scenarios × 2 levels
    v = verify(run_dir)
    assert v.ok, (v.modified, v.missing, v.inconsistent)
