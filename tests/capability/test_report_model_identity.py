"""Capability of a --url lane: the build it was measured with is derived as the node's is, so a
server that reports no build number ("b0-unknown") is recognised as itself; and the LiteLLM
fragment says when the weights were synthetic."""

import json

import pytest

from satbench.cli.main import main


def sweep_and_capability(fake_server, tmp_path, capsys, build_info: str, *extra) -> str:
    fake = fake_server(build_info=build_info, decode_iteration_ms=1.0)
    run = tmp_path / "run"
    assert main(["sweep", "--url", fake.base_url, "--concurrency", "1,2", "--repetitions", "1",
                 "--requests-per-level", "6", "--prompt-tokens", "16", "--output-tokens", "4",
                 "-o", str(run)]) == 0
    capsys.readouterr()
    assert main(["capability", "--recommendations", str(run / "recommendations.json"),
                 "--url", fake.base_url, *extra]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("build_info", ["b0-unknown", "b11434-1a2b3c4"])
def test_a_url_lane_measured_on_the_same_server_is_advertised(fake_server, tmp_path, capsys, build_info):
    (lane,) = json.loads(sweep_and_capability(fake_server, tmp_path, capsys, build_info))["lanes"]
    assert lane["status"] == "measured", lane["reason"]
    # the file is on the server's machine: nothing is read of it, nothing guessed, nothing to note
    assert lane["model_architecture"] is lane["model_file_type"] is lane["model_parameter_count"] is None
    assert not any("architecture" in n for n in lane["notes"])
    (recorded,) = json.loads((tmp_path / "run" / "results.json").read_text())["lanes"]
    assert recorded["model"]["architecture"] is recorded["model"]["expert_count"] is None


def test_a_url_lane_whose_server_now_reports_another_build_is_refused(fake_server, tmp_path, capsys,
                                                                      monkeypatch):
    from satbench.capability import node as capability

    real = capability.remote_props

    def other_build(lane):
        props, why = real(lane)
        return {**props, "build_info": "b0-other"}, why
    monkeypatch.setattr(capability, "remote_props", other_build)
    (lane,) = json.loads(sweep_and_capability(fake_server, tmp_path, capsys, "b0-unknown"))["lanes"]
    assert lane["status"] == "unmeasured"
    assert "another runtime build (b0-unknown ≠ b0-other)" in lane["reason"]


@pytest.mark.parametrize("synthetic", [True, False, None])
def test_the_litellm_fragment_says_when_the_weights_were_synthetic(synthetic):
    import yaml

    from satbench.capability.identity import this_node
    from satbench.capability.report import CapabilityReport, LaneCapability, render_litellm
    from satbench.config.schema import LaneConfig, RunConfig, RuntimeConfig
    from satbench.records.manifest import HostInfo

    host = HostInfo(cpu_model="AMD EPYC", cores_logical=2, cores_physical=2, ram_bytes=2**34, os="Linux",
                    python="3.11")
    lane = LaneCapability(lane="default", status="measured", model_path="/m/tiny.gguf", model_sha256="a" * 64,
                          synthetic_model=synthetic, max_concurrency=4, expected_output_tok_per_s=100.0,
                          expected_p95_ttft_ms=20.0, measured_at="2026-01-01T00:00:00+00:00")
    url_runtime = RuntimeConfig(kind="url", model=None, url="http://127.0.0.1:1")
    cfg = RunConfig(lanes=[LaneConfig(runtime=url_runtime)])
    report = CapabilityReport(generated_at="2026-01-01T00:00:00+00:00", hardware_fingerprint="f" * 64,
                              hardware=host, node=this_node(cfg.lanes, "n1"), lanes=[lane])
    text = render_litellm(report)
    assert ("satbench_synthetic_weights: true" in text) is bool(synthetic)
    assert ("SYNTHETIC random weights" in text) is bool(synthetic)
    (entry,) = yaml.safe_load(text)["model_list"]
    assert entry["litellm_params"]["max_parallel_requests"] == 4
    assert entry["litellm_params"]["api_base"] == "http://127.0.0.1:1/v1"
    assert entry["model_info"].get("satbench_synthetic_weights") is (True if synthetic else None)
