"""The capability report on this node: a real (tiny, embedded) run's recommendation is accepted,
and every kind of mismatch or damage is refused — the lane is then unmeasured with concurrency 1."""

import json
from pathlib import Path

import pytest

from satbench.cli.main import main
from satbench.gguf.synthetic import write_synthetic_gguf

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cap")
    model = tmp / "tiny.gguf"
    write_synthetic_gguf(model, "llama", "tiny", 11)
    run = tmp / "run"
    # one level: its recommendation cannot hang on CIs that a busy test machine widens (saturation/knee)
    assert main(["sweep", "--model", str(model), "--concurrency", "1", "--repetitions", "2",
                 "--requests-per-level", "8", "--prompt-tokens", "32", "--output-tokens", "12",
                 "-o", str(run)]) == 0
    return model, run / "recommendations.json"


def capability(capsys, recs: Path, model: Path, *extra) -> dict:
    capsys.readouterr()
    assert main(["capability", "--recommendations", str(recs), "--model", str(model), *extra]) == 0
    report = json.loads(capsys.readouterr().out)
    (lane,) = report["lanes"]
    return lane


def edited(tmp_path, recs: Path, change) -> Path:
    data = json.loads(recs.read_text())
    change(data["lanes"][0])
    out = tmp_path / "recommendations.json"
    out.write_text(json.dumps(data))
    return out


def test_the_nodes_own_recommendation_is_advertised(measured, capsys):
    model, recs = measured
    lane = capability(capsys, recs, model)
    rec = json.loads(recs.read_text())["lanes"][0]
    assert lane["status"] == "measured" and lane["max_concurrency"] == rec["recommended_concurrency"]
    assert lane["expected_output_tok_per_s"] == rec["expected"]["output_tok_per_s"]["value"]
    assert lane["synthetic_model"] is True and lane["evidence"]["run_id"] == "run"
    assert rec["model"]["architecture"] == lane["model_architecture"] == "llama" and lane["notes"] == []
    assert lane["model_file_type"] == rec["model"]["file_type"] == "F16"
    memory = rec["memory"]  # the lane's memory per slot travels with what the node advertises
    assert lane["cache_bytes_per_slot"] == memory["cache_bytes_per_slot"] > 0
    assert lane["model_bytes"] == memory["model_bytes"] > 0 and lane["per_slot_ctx"] == memory["per_slot_ctx"]
    assert lane["slots_fit"] == memory["slots_fit"] >= rec["slots"]


def test_litellm_fragment(measured, capsys):
    model, recs = measured
    capsys.readouterr()
    assert main(["capability", "--recommendations", str(recs), "--model", str(model),
                 "--format", "litellm"]) == 0
    text = capsys.readouterr().out
    rec = json.loads(recs.read_text())["lanes"][0]
    assert "model_list:" in text and f"max_parallel_requests: {rec['recommended_concurrency']}" in text
    # a server satbench starts has no model id to route by: llama-server's alias is this machine's file path
    assert rec["runtime"]["model_alias"] and 'model: openai/default' in text and str(model) not in text
    assert capability(capsys, recs, model)["served_model"] is None


def test_recommendations_derived_before_whole_request_throughput_are_refused(measured, capsys, tmp_path):
    model, recs = measured
    data = json.loads(recs.read_text())
    data["schema_version"] = "1.4"
    old = tmp_path / "recommendations.json"
    old.write_text(json.dumps(data))
    lane = capability(capsys, old, model)
    assert lane["status"] == "unmeasured" and lane["max_concurrency"] == 1
    assert "schema 1.4, derived before throughput was taken over whole requests" in lane["reason"]


def test_litellm_fragment_without_a_p95(measured, capsys, tmp_path):
    """A level without a p95 TTFT (no successful request in its window) prints null, not a traceback."""
    model, recs = measured

    def drop_ttft(r):
        r["expected"]["p95_ttft_ms"] = None
        for lv in r["measured_levels"]:
            if lv["concurrency"] == r["recommended_concurrency"]:
                lv["p95_ttft_ms"] = None

    capsys.readouterr()
    assert main(["capability", "--recommendations", str(edited(tmp_path, recs, drop_ttft)),
                 "--model", str(model), "--format", "litellm"]) == 0
    assert "satbench_expected_p95_ttft_ms: null" in capsys.readouterr().out


def test_a_recommendation_that_recorded_no_architecture_is_advertised_and_says_so(measured, capsys, tmp_path):
    model, recs = measured
    lane = capability(capsys, edited(tmp_path, recs, lambda r: r["model"].update(architecture=None)), model)
    assert lane["status"] == "measured" and lane["model_architecture"] == "llama"  # read from the file here
    assert [n for n in lane["notes"] if n.startswith("architecture not recorded when measured")]


@pytest.mark.parametrize("name, change, needle", [
    ("wrong hardware", lambda r: r.update(hardware_fingerprint="0" * 64), "another machine"),
    ("wrong build", lambda r: r["runtime"].update(build_number=1), "another runtime build"),
    ("stale", lambda r: r.update(measured_at="2020-01-01T00:00:00+00:00"), "stale"),
    ("tampered level", lambda r: r.update(recommended_concurrency=64), "not a measured level"),
    ("tampered figure", lambda r: r["expected"]["output_tok_per_s"].update(value=1e9), "expected throughput"),
    ("tampered latency", lambda r: r["expected"].update(p95_ttft_ms=1.0), "p95 TTFT or TPOT differs"),
    ("no safe level", lambda r: r.update(recommended_concurrency=None, expected=None), "no safe concurrency"),
    ("figures without a level", lambda r: r.update(recommended_concurrency=None), "expected figures without"),
    ("edited hardware block", lambda r: r["hardware"].update(cores_logical=999),
     "not the hash of its own hardware"),
    ("an earlier satbench's fingerprint",
     lambda r: (r["hardware"].update(cpu_signature=None, cores_usable=None),
                r.update(hardware_fingerprint="1" * 64)),
     "measured on this machine, but its hardware fingerprint was computed by an earlier satbench"),
    ("another architecture", lambda r: r["model"].update(architecture="deepseek4"),
     "measured with another model architecture: deepseek4 (DeepSeek V4) then, llama in this node's file"),
    ("schema-invalid", lambda r: r.update(recommended_concurrency="lots"), "fails schema validation"),
    ("schema-invalid missing key", lambda r: r.pop("binding"), "fails schema validation"),
])
def test_refusals(measured, capsys, tmp_path, name, change, needle):
    model, recs = measured
    lane = capability(capsys, edited(tmp_path, recs, change), model)
    assert lane["status"] == "unmeasured" and needle in lane["reason"], lane["reason"]
    assert lane["max_concurrency"] == 1 and lane["expected_output_tok_per_s"] is None


def test_a_file_with_one_recommendation_per_machine_gives_this_machines(measured, capsys, tmp_path):
    """recommendations.json is keyed by lane × machine: another machine's entry for the same lane
    must not hide this machine's."""
    model, recs = measured
    data = json.loads(recs.read_text())
    other = json.loads(json.dumps(data["lanes"][0]))
    other["hardware"]["cores_logical"] += 64
    from satbench.records.manifest import HostInfo

    other["hardware_fingerprint"] = HostInfo.model_validate(other["hardware"]).fingerprint()
    first_level = data["lanes"][0]["measured_levels"][0]["concurrency"]
    other["recommended_concurrency"] = other["expected"]["concurrency"] = first_level
    data["lanes"].append(other)  # the lane's last entry: a dict keyed by lane alone took it
    both = tmp_path / "recommendations.json"
    both.write_text(json.dumps(data))
    lane = capability(capsys, both, model)
    assert lane["status"] == "measured", lane["reason"]
    assert lane["max_concurrency"] == data["lanes"][0]["recommended_concurrency"]


def test_a_remote_server_that_does_not_name_its_model_is_not_vouched_for():
    from satbench.capability.checks import check_lane
    from satbench.capability.node import NodeLane

    node = NodeLane(lane="r", model_path=None, model_sha256=None, runtime_kind="url", runtime_build="8000")
    assert "does not say which model it serves" in check_lane(object(), node, "f", None, None)


def test_refused_for_another_model_file(measured, capsys, tmp_path):
    _, recs = measured
    other = tmp_path / "other.gguf"
    write_synthetic_gguf(other, "llama", "tiny", 12)
    lane = capability(capsys, recs, other)
    assert lane["status"] == "unmeasured" and "another model file" in lane["reason"]


def test_refused_when_corrupt(measured, capsys, tmp_path):
    """A named recommendations file that is half-written is an error of its class (5), not a report
    of unmeasured lanes a router would read as a node that was never measured."""
    model, recs = measured
    bad = tmp_path / "recommendations.json"
    bad.write_text(recs.read_text()[:200])
    capsys.readouterr()
    assert main(["capability", "--recommendations", str(bad), "--model", str(model)]) == 5
    assert "is not valid JSON (half-written?)" in capsys.readouterr().err


def test_refused_when_older_than_the_allowed_age(measured, capsys):
    model, recs = measured
    lane = capability(capsys, recs, model, "--max-age-days", "0.000001")
    assert lane["status"] == "unmeasured" and "stale" in lane["reason"]


def test_a_contended_recommendation_is_refused_unless_accepted(measured, capsys, tmp_path):
    model, recs = measured
    contended = edited(tmp_path, recs, lambda r: r.update(contended=True, contended_levels=[1]))
    lane = capability(capsys, contended, model)
    assert lane["status"] == "unmeasured" and "--accept-contended" in lane["reason"]
    assert "contended levels 1" in lane["reason"]
    lane = capability(capsys, contended, model, "--accept-contended")
    assert lane["status"] == "measured"
