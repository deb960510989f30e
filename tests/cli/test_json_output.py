"""--json: every command prints one JSON document on stdout, valid against the schema `satbench schema
output-COMMAND` publishes; the tables are not on stdout; --quiet leaves stdout empty."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from satbench.cli.args import OUTPUT_SCHEMA_NAMES
from satbench.cli.main import main
from tests.bundles import unpacked_copy
from tests.fakes.fairness_harness import FAIR

BUNDLE = Path(__file__).resolve().parents[2] / "evidence" / "cpu-2core-2026-12-01" / "run"
TINY = ["--requests-per-level", "4", "--repetitions", "1", "--prompt-tokens", "16", "--output-tokens", "4"]


def _schema(name: str, capsys) -> dict:
    assert main(["schema", name]) == 0
    schema = json.loads(capsys.readouterr().out)
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


def _json_of(argv: list[str], capsys, code: int = 0) -> dict:
    assert main([*argv, "--json"]) == code
    out = capsys.readouterr().out
    doc = json.loads(out)  # one document, nothing else on stdout
    command = "-".join(argv[:2]) if argv[0] in ("models", "fleet") else argv[0]
    jsonschema.validate(doc, _schema(f"output-{command}", capsys))
    return doc


@pytest.fixture
def run(tmp_path) -> Path:
    """A copy of the committed bundle, its raw files unpacked (the committed one is never touched)."""
    return unpacked_copy(BUNDLE, tmp_path / "run")


def test_every_output_schema_is_published(capsys):
    for name in OUTPUT_SCHEMA_NAMES:
        _schema(name, capsys)


def test_the_read_commands_json_validates(run, tmp_path, capsys):
    doc = _json_of(["verify", str(run)], capsys)
    assert doc["exit_code"] == 0 and doc["verification"]["run_dir"] == str(run)
    doc = _json_of(["compare", str(run), str(run)], capsys)
    assert doc["run_a"] == str(run)
    doc = _json_of(["analyze", str(run)], capsys)
    assert {lane["lane"] for lane in doc["results"]["lanes"]} == {"dense", "v4"}
    doc = _json_of(["recommend", str(run)], capsys)
    assert doc == json.loads((run / "recommendations.json").read_text())
    doc = _json_of(["report", str(run)], capsys)
    assert doc["report"]["bundle_digest"]
    doc = _json_of(["capability", "--recommendations", str(run / "recommendations.json"),
                    "--url", "http://127.0.0.1:1"], capsys)
    assert [lane["status"] for lane in doc["lanes"]] == ["unmeasured"]
    doc = _json_of(["schema", "results"], capsys)
    assert doc["title"].startswith("satbench results")


def test_models_make_json_validates(tmp_path, capsys):
    doc = _json_of(["models", "make", "--arch", "llama", "--size", "tiny", "-o", str(tmp_path / "m.gguf")],
                   capsys)
    assert doc["model"]["arch"] == "llama"


def test_an_error_prints_nothing_on_stdout(tmp_path, capsys):
    assert main(["analyze", str(tmp_path / "nothing"), "--json"]) == 5
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("satbench: error: ")


def test_sweep_json_validates_and_quiet_prints_nothing(fake_server, tmp_path, capsys):
    fake = fake_server(n_slots=2, decode_iteration_ms=2.0)
    doc = _json_of(["sweep", "--url", fake.base_url, "--concurrency", "1,2", *TINY,
                    "-o", str(tmp_path / "a")], capsys)
    assert doc["status"] == "complete" and doc["exit_code"] == 0 and doc["results"]["lanes"]
    assert main(["sweep", "--url", fake.base_url, "--concurrency", "1", *TINY, "-o", str(tmp_path / "b"),
                 "--quiet"]) == 0
    assert capsys.readouterr().out == ""


def test_fairness_json_validates(fake_server, tmp_path, capsys):
    fake = fake_server(**{**FAIR, "prefill_ms_per_token": 1.0})
    doc = _json_of(["fairness", "--url", fake.base_url, "--batch-size", "256", "--prompt-tokens", "32",
                    "--output-tokens", "16", "--checks", "S1", "-o", str(tmp_path / "run")], capsys)
    assert doc["command"] == "fairness" and doc["results"]["lanes"][0]["fairness"]
