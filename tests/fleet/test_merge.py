"""`satbench fleet merge`: per-node capability reports into one router configuration, and what it
refuses (duplicate node ids, stale or foreign reports, a report whose node is not the machine it
claims). No Ray and no server: the reports are made in memory."""

from __future__ import annotations

import datetime as dt
import json

import pytest
import yaml

from satbench.capability.report import CAPABILITY_SCHEMA_VERSION
from satbench.cli.main import main
from tests.fleet.reports import NOW, host, lane, no_recommendations, report, write


def merge(capsys, *args) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["fleet", "merge", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def fleet(tmp_path):
    """Two nodes of one class and one of another; node c's dense lane is unmeasured."""
    a = write(tmp_path, "a", report("node-a", [lane("dense", 4, 120.0), lane("moe", 2, 300.0)]))
    b = write(tmp_path, "b", report("node-b", [lane("dense", 4, 118.0), lane("moe", 2, 290.0)]))
    c = write(tmp_path, "c", report("node-c", [lane("dense", measured=False), lane("moe", 8, 700.0)],
                                    hw=host("NVIDIA host", 32)))
    return a, b, c


def test_litellm_is_one_deployment_per_node_and_lane_under_the_lanes_model_name(fleet, capsys):
    code, out, err = merge(capsys, *fleet, "--format", "litellm")
    assert code == 0, err
    deployments = yaml.safe_load(out)["model_list"]
    assert [d["model_info"]["id"] for d in deployments] == [
        "node-a/dense", "node-a/moe", "node-b/dense", "node-b/moe", "node-c/dense", "node-c/moe"]
    dense = [d for d in deployments if d["model_name"] == "dense"]
    assert [d["litellm_params"]["api_base"] for d in dense] == [
        "http://node-a:8080/v1", "http://node-b:8080/v1", "http://node-c:8080/v1"]
    assert [d["litellm_params"]["max_parallel_requests"] for d in dense] == [4, 4, 1]
    assert [d["model_info"]["satbench_status"] for d in dense] == ["measured", "measured", "unmeasured"]


def test_json_carries_every_deployment_and_the_lanes_totals(fleet, capsys):
    code, out, _ = merge(capsys, *fleet)
    assert code == 0
    data = json.loads(out)
    assert [n["node_id"] for n in data["nodes"]] == ["node-a", "node-b", "node-c"]
    totals = {t["lane"]: t for t in data["lanes"]}
    assert totals["moe"]["max_concurrency"] == 12 and totals["moe"]["measured_nodes"] == 3
    assert totals["dense"]["expected_output_tok_per_s"] == pytest.approx(238.0)
    assert main(["schema", "fleet"]) == 0


def test_prometheus_is_a_node_exporter_textfile(fleet, capsys):
    code, out, _ = merge(capsys, *fleet, "--format", "prometheus")
    assert code == 0
    samples = [line for line in out.splitlines() if line and not line.startswith("#")]
    assert 'satbench_max_concurrency{node="node-c",lane="moe"} 8' in samples
    assert 'satbench_lane_measured{node="node-c",lane="dense"} 0' in samples
    assert 'satbench_expected_p95_ttft_seconds{node="node-a",lane="dense"} 0.2104' in samples
    assert not any("node-c\",lane=\"dense\"" in s for s in samples if s.startswith("satbench_expected"))
    for name in {s.split("{")[0] for s in samples}:
        assert f"# TYPE {name} gauge" in out


@pytest.mark.parametrize("name", ["yes", "null", "1.5", "on", "0x10", "true", "2026-12-01"])
def test_yaml_keeps_lane_names_strings(tmp_path, capsys, name):
    """A hand-written YAML leaves these unquoted, and they load as a boolean, null, float or date."""
    path = write(tmp_path, "a", report("node-a", [lane(name)]))
    code, out, _ = merge(capsys, path, "--format", "litellm")
    assert code == 0
    (d,) = yaml.safe_load(out)["model_list"]
    assert d["model_name"] == name and d["model_info"]["id"] == f"node-a/{name}"
    assert d["litellm_params"]["model"] == f"openai/{name}"


def test_a_duplicate_node_id_refuses_both_reports_and_writes_nothing(tmp_path, capsys):
    a = write(tmp_path, "a", report("node-a", [lane("dense")]))
    again = write(tmp_path, "a2", report("node-a", [lane("dense")],
                                         api_base={"dense": "http://10.0.0.1:9/v1"}))
    code, out, err = merge(capsys, a, again, "--format", "litellm")
    assert code == 8 and out == ""
    assert f"refused {a}: duplicate: node id node-a is also {again}'s" in err
    assert f"refused {again}: duplicate: node id node-a is also {a}'s" in err
    assert "2 of 2 reports refused; nothing written" in err
    code, _, err = merge(capsys, a, a)  # one file named twice
    assert code == 8 and err.count(f"refused {a}: duplicate: node id node-a is also {a}'s") == 2


def test_two_nodes_claiming_one_api_base_are_refused(tmp_path, capsys):
    a = write(tmp_path, "a", report("node-a", [lane("dense")], api_base={"dense": "http://10.0.0.1:8080/v1"}))
    b = write(tmp_path, "b", report("node-b", [lane("dense")], api_base={"dense": "http://10.0.0.1:8080/v1"}))
    code, _, err = merge(capsys, a, b)
    assert code == 8 and "lane dense's api_base http://10.0.0.1:8080/v1 is also" in err


def test_stale_and_future_reports_are_refused(tmp_path, capsys):
    old = write(tmp_path, "old", report("node-a", [lane("dense")], at=NOW - dt.timedelta(days=31)))
    code, _, err = merge(capsys, old)
    assert code == 8 and "stale: generated 31 days ago, the limit is 30 days" in err
    assert merge(capsys, old, "--max-age-days", "40")[0] == 0
    ahead = write(tmp_path, "ahead", report("node-b", [lane("dense")], at=NOW + dt.timedelta(hours=1)))
    assert "generated in the future" in merge(capsys, ahead)[2]
    long_ago = (NOW - dt.timedelta(days=45)).isoformat()
    measured_long_ago = lane("dense").model_copy(update={"measured_at": long_ago})
    c = write(tmp_path, "c", report("node-c", [measured_long_ago]))
    assert "stale: lane dense was measured 45 days ago" in merge(capsys, c)[2]


def test_foreign_reports_are_refused(tmp_path, capsys):
    good = report("node-a", [lane("dense")])
    older = json.loads(good.model_dump_json())
    del older["node"]
    older["schema_version"] = "1.3"
    (tmp_path / "older.json").write_text(json.dumps(older))
    (tmp_path / "results.json").write_text('{"schema_version": "3.1", "lanes": []}')
    (tmp_path / "broken.json").write_text("{")
    edited = json.loads(good.model_dump_json())
    edited["lanes"][0]["max_concurrency"] = "lots"
    (tmp_path / "edited.json").write_text(json.dumps(edited))
    code, _, err = merge(capsys, *(tmp_path / f"{n}.json" for n in ("older", "results", "broken", "edited")),
                         tmp_path / "missing.json")
    assert code == 8
    assert "foreign: capability schema 1.3, written before the node block (1.4)" in err
    assert "foreign: not a satbench capability report" in err
    assert "foreign: not valid JSON" in err
    assert ("foreign: fails the capability schema: lanes.0.max_concurrency: 'lots' is not of type "
            "'integer'") in err
    assert "missing.json: No such file or directory" in err


@pytest.mark.parametrize("edit, needle", [
    (lambda d: d["lanes"].extend([d["lanes"][0]] * 4_999),
     "lane 'dense' appears 5,000 times: one entry per lane"),
    (lambda d: d["lanes"][0].update(max_concurrency=10**30), "max_concurrency"),
    (lambda d: d["lanes"][0].update(max_concurrency=4_097), "must be an integer from 1 to 4,096"),
    (lambda d: d["lanes"][0].update(expected_output_tok_per_s=-5.0), "expected_output_tok_per_s"),
    (lambda d: d["lanes"][0].update(concurrency_range=[0, 8]), "concurrency_range"),
    (lambda d: d["node"]["api_base"].update(dense="http://node-a:8080/v1?token=SECRET"), "query string"),
    (lambda d: d["node"]["api_base"].update(dense="http://node-a:99999/v1"),
     "the port must be from 1 to 65,535"),
])
def test_a_report_whose_figures_a_router_cannot_take_is_refused(tmp_path, capsys, edit, needle):
    """Figures outside satbench's own ranges, a lane twice, an api_base that would publish a token or
    name no port: refused, and nothing of them reaches the router's config."""
    data = json.loads(report("node-a", [lane("dense")]).model_dump_json())
    edit(data)
    (tmp_path / "forged.json").write_text(json.dumps(data))
    code, out, err = merge(capsys, tmp_path / "forged.json", "--format", "litellm")
    assert code == 8 and out == "" and needle in err and "SECRET" not in err, err


def test_a_report_whose_node_is_not_the_machine_it_claims_is_refused(tmp_path, capsys):
    """Its hardware block edited (the fingerprint no longer its hash), an api_base naming another
    host, or a loopback one."""
    rep = report("node-a", [lane("dense")])
    moved = rep.model_copy(update={"hardware": host("Intel Xeon", 8).model_copy(
        update={"fingerprint_sha256": rep.hardware_fingerprint})})
    other_host = report("node-b", [lane("dense")], api_base={"dense": "http://node-c:8080/v1"})
    loopback = report("node-d", [lane("dense")], api_base={"dense": "http://127.0.0.1:8080/v1"})
    by_address = report("node-e", [lane("dense")], api_base={"dense": "http://10.0.0.5:8080/v1"},
                        addresses=["10.0.0.5"])
    by_fqdn = report("node-f", [lane("dense")], api_base={"dense": "http://node-f.example.net:8080/v1"},
                     hostname="node-f.example.net")
    paths = [write(tmp_path, r.node.node_id, r) for r in (moved, other_host, loopback, by_address, by_fqdn)]
    code, _, err = merge(capsys, *paths)
    assert code == 8 and "3 of 5 reports refused" in err
    assert "is not the hash of its own hardware description" in err
    assert ("lane dense: api_base 'http://node-c:8080/v1' names 'node-c', which is not this node (node-b, "
            "hostname 'node-b', addresses 10.0.0.1)") in err
    assert "lane dense: api_base 'http://127.0.0.1:8080/v1' is loopback" in err
    assert "node-e" not in err and "node-f" not in err


def test_capability_writes_the_node_block(tmp_path, capsys):
    url = "http://127.0.0.1:9"  # nothing listens: the lane is unmeasured, its node block is still written
    none = str(no_recommendations(tmp_path))
    assert main(["capability", "--recommendations", none, "--url", url,
                 "--node-id", "gpu-7", "--api-base", "default=http://gpu-7:8080/v1"]) == 0
    node = json.loads(capsys.readouterr().out)["node"]
    assert node["node_id"] == "gpu-7" and node["api_base"] == {"default": "http://gpu-7:8080/v1"}
    assert main(["capability", "--recommendations", none, "--url", url]) == 0
    import socket

    node = json.loads(capsys.readouterr().out)["node"]
    assert node["node_id"] == node["hostname"] == socket.gethostname()
    assert node["api_base"] == {"default": f"{url}/v1"}
    assert main(["capability", "--recommendations", "x", "--api-base", "nolane=http://h:1"]) == 2
    assert "no lane 'nolane'" in capsys.readouterr().err
    assert main(["capability", "--recommendations", "x", "--api-base", "http://u:key@h:1"]) == 2
    assert "user:password" in capsys.readouterr().err
    for base, needle in (("http://h/v1?token=SECRET", "a query string or fragment"),
                         ("http://h/v1#SECRET", "a query string or fragment"),
                         ("http://h:99999/v1", "the port must be from 1 to 65,535"),
                         ("http://h:0/v1", "the port must be from 1 to 65,535")):
        assert main(["capability", "--recommendations", "x", "--api-base", base]) == 2
        err = capsys.readouterr().err
        assert needle in err and "SECRET" not in err and err.count("\n") == 1, err


def test_in_a_fleet_run_the_report_must_come_from_the_node_ray_ran_it_on():
    """fleet run knows each node's hostname and Ray node id from Ray: a report written elsewhere is
    refused."""
    from satbench.fleet.merge import Expected, identity_problems

    rep = report("node-a", [lane("dense")])
    rep = rep.model_copy(update={"node": rep.node.model_copy(update={"ray_node_id": "a" * 56})})
    assert identity_problems(rep, Expected(hostname="node-a", ray_node_id="a" * 56)) == []
    assert identity_problems(rep, Expected(hostname="node-b", ray_node_id="b" * 56)) == [
        "written on node-a, but node node-a is node-b",
        f"written on Ray node {'a' * 56}, but node node-a is Ray node {'b' * 56}"]


def test_litellm_weights_each_node_by_its_measured_throughput(fleet, capsys):
    code, out, _ = merge(capsys, *fleet, "--format", "litellm")
    assert code == 0
    deployments = yaml.safe_load(out)["model_list"]
    weights = {d["model_info"]["id"]: d["litellm_params"]["weight"] for d in deployments}
    assert weights["node-a/dense"] == 120 and weights["node-c/moe"] == 700 and weights["node-c/dense"] == 1


def test_json_is_one_document_valid_against_its_published_schema(fleet, capsys):
    import jsonschema

    assert main(["schema", "output-fleet-merge"]) == 0
    schema = json.loads(capsys.readouterr().out)
    code, out, err = merge(capsys, *fleet, "--format", "litellm", "-o", fleet[0].parent / "router.yaml",
                           "--json")
    assert code == 0, err
    doc = json.loads(out)  # the router config went to the file; stdout holds the JSON document alone
    jsonschema.validate(doc, schema)
    assert (fleet[0].parent / "router.yaml").is_file()
    assert sorted(n["node_id"] for n in doc["nodes"]) == ["node-a", "node-b", "node-c"]


def test_a_report_of_an_earlier_minor_is_read_with_its_missing_fields_null(tmp_path, capsys):
    """Capability 1.5 added the model's description (architecture, file type, ...); a node still on
    1.4 is merged, its lanes' descriptions null."""
    older = json.loads(report("node-a", [lane("dense")]).model_dump_json())
    older["schema_version"] = "1.4"
    for entry in older["lanes"]:
        for key in [k for k in entry if k.startswith("model_") and k not in ("model_path", "model_sha256")]:
            del entry[key]
        del entry["notes"], entry["workload"], entry["workload_accepted"]
    (tmp_path / "older.json").write_text(json.dumps(older))
    code, out, err = merge(capsys, tmp_path / "older.json", "--format", "litellm")
    assert code == 0, err
    (deployment,) = yaml.safe_load(out)["model_list"]
    assert deployment["model_info"]["satbench_status"] == "measured"
    assert not any(k.startswith("satbench_model_") for k in deployment["model_info"])
    newer = dict(older, schema_version="1.99")
    (tmp_path / "newer.json").write_text(json.dumps(newer))
    err = merge(capsys, tmp_path / "newer.json")[2]
    assert f"capability schema 1.99, not {CAPABILITY_SCHEMA_VERSION}: written by another satbench" in err


def test_litellm_carries_each_deployments_workload_and_names_a_lane_of_mixed_workloads(tmp_path, capsys):
    from satbench.config.workload import ChatWorkload, WorkloadConfig
    from satbench.config.workload_profile import profile_of

    chat = profile_of(WorkloadConfig(endpoint="chat", chat=ChatWorkload(turns=4)))
    random = profile_of(WorkloadConfig())
    a = write(tmp_path, "a", report("node-a", [lane("dense").model_copy(update={"workload": chat})]))
    b = write(tmp_path, "b", report("node-b", [lane("dense").model_copy(
        update={"workload": random, "workload_accepted": True})]))
    code, out, err = merge(capsys, a, b, "--format", "litellm")
    assert code == 0, err
    info = [d["model_info"] for d in yaml.safe_load(out)["model_list"]]
    assert [i["satbench_workload"]["text"] for i in info] == ["chat:4", "random"]
    assert info[0]["satbench_workload"]["chat_turns"] == 4
    assert "chat_turns" not in info[1]["satbench_workload"]
    assert [i.get("satbench_workload_accepted") for i in info] == [None, True]
    assert "# lane dense: its nodes were measured with different workloads (chat:4, random)\n" in out
    code, out, _ = merge(capsys, a, "--format", "litellm")
    assert code == 0 and "different workloads" not in out
