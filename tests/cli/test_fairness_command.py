"""`satbench fairness` end to end against the fake server in its own process: exit codes,
verdicts.json, recomputation by `analyze`, thresholds from the lane file."""

import json

import jsonschema
import pytest

from satbench.analysis.results import VERDICTS_FILE, verdicts_json_schema
from satbench.cli.main import main
from tests.fakes.fairness_harness import FAIR


def _args(url, out, *extra):
    return ["fairness", "--url", url, "--batch-size", "256", "--prompt-tokens", "32", "--output-tokens", "16",
            "--checks", "S1", "-o", str(out), *extra]


def test_a_failing_check_exits_non_zero_and_analyze_recomputes_the_verdicts(fake_server, tmp_path, capsys):
    # prefill at 2 ms/token: the injected 1.75 × n_batch stalls decode ~130 ms past S1's 1.5 × n_batch
    # bound, clear of a loaded host's noise (at 0.5 ms/token the margin was ~30 ms and read marginal)
    fake = fake_server(**{**FAIR, "prefill_ms_per_token": 2.0}, prefill_first=True)
    out = tmp_path / "run"
    assert main(_args(fake.base_url, out)) == 6
    assert "fairness or starvation check failed" in capsys.readouterr().err
    text = (out / VERDICTS_FILE).read_text()
    data = json.loads(text)
    jsonschema.validate(data, verdicts_json_schema())
    (s1,) = data["lanes"][0]["verdicts"]
    itl = next(s for s in s1["statistics"] if s["name"] == "max_itl_ms")
    assert s1["check"] == "S1" and s1["verdict"] == "fail" and itl["ci_low"] > itl["bound"]
    results = json.loads((out / "results.json").read_text())
    assert results["lanes"][0]["fairness"][0]["verdict"] == "fail"
    (out / VERDICTS_FILE).unlink()
    assert main(["analyze", str(out)]) == 0
    assert (out / VERDICTS_FILE).read_text() == text


@pytest.mark.alone  # S1's CIs span a few injections: a loaded host (the default run's 4 workers) widens
def test_fair_server_exits_zero(fake_server, tmp_path):  # them past the bound, marginal instead of pass
    # prefill at 1 ms/token: S1's bounds (1.5 × a 256-token chunk, 1.25 × the solo prefill) then
    # clear a fair server by ~130 ms and ~150 ms, far above a loaded host's scheduling noise
    fake = fake_server(**{**FAIR, "prefill_ms_per_token": 1.0})
    assert main(_args(fake.base_url, tmp_path / "run")) == 0
    (s1,) = json.loads((tmp_path / "run" / VERDICTS_FILE).read_text())["lanes"][0]["verdicts"]
    assert s1["verdict"] == "pass" and "solo prefill rate" in s1["derivation"]


def test_thresholds_come_from_the_lane_file(fake_server, tmp_path):
    fake = fake_server(**FAIR, prefill_first=True)
    lanes = tmp_path / "lanes.toml"
    lanes.write_text(f"""
[[lanes]]
name = "lenient"
runtime = "url"
url = "{fake.base_url}"
prompt_tokens = 32
output_tokens = 16

[lanes.server]
batch_size = 256

[lanes.fairness]
checks = ["S1"]
s1_batch_factor = 20.0
""")
    out = tmp_path / "run"
    assert main(["fairness", "--lanes", str(lanes), "-o", str(out)]) == 0
    (s1,) = json.loads((out / VERDICTS_FILE).read_text())["lanes"][0]["verdicts"]
    assert s1["verdict"] == "pass" and "20 × n_batch" in s1["derivation"]


def test_unknown_check_and_bad_threshold_are_user_errors(tmp_path, capsys):
    assert main(["fairness", "--url", "http://127.0.0.1:9", "--checks", "S9", "-o", str(tmp_path / "r")]) == 2
    assert "--checks S9" in capsys.readouterr().err
    lanes = tmp_path / "l.toml"
    lanes.write_text('[[lanes]]\nname = "a"\n\n[lanes.fairness]\nf1_max_min_ratio = 0.5\n')
    assert main(["fairness", "--lanes", str(lanes), "-o", str(tmp_path / "r2")]) == 2
    assert "l.toml:5: lanes[0].fairness.f1_max_min_ratio" in capsys.readouterr().err
