"""Every file `fleet merge` writes parses back to what it was given, whatever the lane and node names:
the JSON against its schema, the LiteLLM YAML, and the Prometheus textfile, whose series are
unique and which `promtool check metrics` accepts (Debian's promtool; .ci/run installs it)."""

from __future__ import annotations

import json
import shutil
import subprocess

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from satbench.cli.main import main
from satbench.config.schema import LANE_NAME_PATTERN
from satbench.fleet.export import fleet_json_schema
from tests.fleet.reports import host, lane, no_recommendations, report, write

# every name satbench takes (test_merge_refusals tries the others)
NAMES = st.from_regex(LANE_NAME_PATTERN, fullmatch=True)


def merged(tmp_path, capsys, fmt: str, lane_names: list[str]) -> str:
    paths = [write(tmp_path, "a", report("node-a", [lane(n, 4, 100.0) for n in lane_names])),
             write(tmp_path, "b", report("node-b", [lane(lane_names[0], 2, 50.0)]
                                         + [lane(n, measured=False) for n in lane_names[1:]],
                                         hw=host("NVIDIA host", 32)))]
    capsys.readouterr()
    code = main(["fleet", "merge", *map(str, paths), "--format", fmt])
    out = capsys.readouterr()
    assert code == 0, out.err
    return out.out


def series(text: str) -> list[tuple[str, tuple]]:
    """Every sample of a Prometheus textfile as (name, sorted labels), parsed by prometheus_client."""
    return [(s.name, tuple(sorted(s.labels.items())))
            for family in text_string_to_metric_families(text) for s in family.samples]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names=st.lists(NAMES, min_size=1, max_size=3, unique=True))
def test_every_format_parses_back_to_the_lanes_it_was_given(tmp_path, capsys, names):
    data = json.loads(merged(tmp_path, capsys, "json", names))
    jsonschema.validate(data, fleet_json_schema())
    assert [d["lane"] for d in data["deployments"]][:len(names)] == names
    model_list = yaml.safe_load(merged(tmp_path, capsys, "litellm", names))["model_list"]
    assert [d["model_name"] for d in model_list][:len(names)] == names
    samples = series(merged(tmp_path, capsys, "prometheus", names))
    assert len(samples) == len(set(samples)), "a series repeats"
    lanes = {dict(labels)["lane"] for name, labels in samples if name == "satbench_max_concurrency"}
    assert lanes == set(names)


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool is not installed here (.ci/run installs Debian's)")
    return found


@pytest.mark.parametrize("names", [["dense"], ["0x10", "a.b_c-d", "Z" * 64]])
def test_promtool_accepts_the_prometheus_textfile(tmp_path, capsys, names):
    text = merged(tmp_path, capsys, "prometheus", names)
    done = subprocess.run([promtool(), "check", "metrics"], input=text, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr
    samples = series(text)
    assert samples and len(samples) == len(set(samples))


@pytest.mark.parametrize("fmt", ["json", "litellm"])
def test_a_single_nodes_capability_output_parses_back(tmp_path, capsys, fmt):
    """`satbench capability` (recommendations for no lane: every lane unmeasured, at 1) as LiteLLM's
    Router and the capability schema read it."""
    capsys.readouterr()
    assert main(["capability", "--recommendations", str(no_recommendations(tmp_path)), "--format", fmt]) == 0
    out = capsys.readouterr().out
    if fmt == "json":
        from satbench.capability.report import capability_json_schema

        jsonschema.validate(json.loads(out), capability_json_schema())
        return
    import os

    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from litellm import Router

    model_list = yaml.safe_load(out)["model_list"]
    assert model_list and all(d["litellm_params"]["api_key"] == "no-key" for d in model_list)
    router = Router(model_list=model_list)
    assert {d["model_info"]["id"] for d in router.registry().all()} == {d["model_info"]["id"]
                                                                         for d in model_list}
