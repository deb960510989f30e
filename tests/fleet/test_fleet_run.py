"""`satbench fleet run` on a local multi-node Ray cluster (ray.cluster_utils.Cluster): three simulated
nodes with their own labels and resources, each driving its own fake llama.cpp server through a url
lane on that node. One cluster for the module (Ray's start is ~6 s here); a test that loses a node
adds its own first. Skipped when Ray is not installed (pip install -e '.[fleet]')."""

from __future__ import annotations

import contextlib
import json
import signal
import threading
from pathlib import Path

import jsonschema
import pytest
import yaml

from satbench.cli.main import main
from tests.conftest import FakeProcess

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")
# A node's sweep takes ~4 s here alone and ran past 90 s beside the default run's four workers: the
# cluster's workers need the host's cores, so the module runs with the other 'alone' tests.
pytestmark = pytest.mark.alone

LANE = "yes"  # a lane name that a hand-written YAML would load as a boolean
LANES = f"""[[lanes]]
name = "{LANE}"
runtime = "url"
url = "http://127.0.0.1:1"
concurrency = [1, 2]
repetitions = 3
requests_per_level = 8
prompt_tokens = 16
output_tokens = 8
"""
FAST_MS, SLOW_MS = 4.0, 20.0
# The per-class test compares runs, so its repetitions must outlast this host's stalls (one 100 ms
# stall in a 130 ms repetition opened the reference's CI): longer decodes, more requests and
# repetitions, for both the lane and the spot check.
CLASS_FAST_MS, CLASS_SLOW_MS, CLASS_REPS = 8.0, 24.0, 5
CLASS_LANES = (LANES.replace("repetitions = 3", f"repetitions = {CLASS_REPS}")
               .replace("requests_per_level = 8", "requests_per_level = 12"))
WALL_LIMIT_S = 300  # a test that runs longer is a hang (21 s alone here, 137 s beside 3 busy loops)
START_LIMIT_S = 90  # the cluster's start (~6 s here)


@contextlib.contextmanager
def _limit(seconds: int, what: str):
    """Fails what runs past `seconds` instead of holding CI until its own timeout: a Ray cluster that
    never comes up, a task that never returns."""
    def expired(signum, frame):
        raise TimeoutError(f"{what} ran past {seconds} s")

    before = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)


@pytest.fixture(autouse=True)
def wall_limit():
    with _limit(WALL_LIMIT_S, "the test"):
        yield


class Fleet:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.cluster = cluster_utils.Cluster(initialize_head=True,
                                             head_node_args={"num_cpus": 0, "include_dashboard": False})
        self.nodes = [self.cluster.add_node(num_cpus=1, resources={f"slot_n{i}": 1},
                                            labels={"satbench/node": f"n{i}"}) for i in range(3)]
        ray.init(address=self.cluster.address, log_to_driver=False)
        self.cluster.wait_for_nodes()
        self.fakes: dict[str, FakeProcess] = {}
        (tmp / "lanes.toml").write_text(LANES)

    def fake(self, name: str, decode_ms: float = FAST_MS) -> FakeProcess:
        if name not in self.fakes:
            d = self.tmp / f"fake-{name}"
            d.mkdir()
            self.fakes[name] = FakeProcess(d, {"n_slots": 2, "decode_iteration_ms": decode_ms})
        return self.fakes[name]

    def inventory(self, name: str, entries: list[str], lanes: str = LANES, timeout_s: int = 90,
                  **top) -> Path:
        (self.tmp / f"{name}-lanes.toml").write_text(lanes)
        head = [f'lanes = "{name}-lanes.toml"', f"timeout_s = {timeout_s}", "accept_contended = true"]
        head += [f"{k} = {v}" for k, v in top.items()]
        path = self.tmp / f"{name}.toml"
        path.write_text("\n".join(head + entries) + "\n")
        return path

    def entry(self, name: str, selector: str, decode_ms: float = FAST_MS) -> str:
        url = self.fake(name, decode_ms).base_url
        return f'[[nodes]]\nname = "{name}"\n{selector}\nurls = {{ {LANE} = "{url}" }}\n'

    def close(self) -> None:
        for f in self.fakes.values():
            f.stop()
        ray.shutdown()
        self.cluster.shutdown()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with _limit(START_LIMIT_S, "the Ray cluster's start"):
        f = Fleet(tmp_path_factory.mktemp("fleet"))
    yield f
    f.close()


@pytest.fixture
def fleet(cluster, contention_guard):
    """The cluster, with the contention guard on here as it is in the Ray workers (the suite turns it
    off in its own process only), so that the central verify derives what the nodes derived."""
    return cluster


def run(fleet: Fleet, inventory: Path, out: str, *extra: str) -> tuple[int, dict, Path]:
    code = main(["fleet", "run", "--inventory", str(inventory), "-o", str(fleet.tmp / out), "--no-progress",
                 *extra])
    record = json.loads((fleet.tmp / out / "fleet.json").read_text())
    return code, {n["node_id"]: n for n in record["nodes"]}, fleet.tmp / out


def test_each_nodes_task_runs_where_it_was_pinned_against_its_own_server(fleet, capsys):
    """Named by label, Ray node id and custom resource; a node nobody has is recorded, the rest go on."""
    n1 = fleet.nodes[1].node_id
    inv = fleet.inventory("placed", [
        fleet.entry("node-0", 'labels = { "satbench/node" = "n0" }'),
        fleet.entry("node-1", f'ray_node_id = "{n1}"'),
        fleet.entry("node-2", 'labels = { "satbench/node" = "n2" }\nresources = { slot_n2 = 1 }'),
        '[[nodes]]\nname = "ghost"\nlabels = { "satbench/node" = "nowhere" }\n'])
    code, nodes, out = run(fleet, inv, "placed")
    assert code == 9  # not every node was merged: the ghost
    ghost = nodes["ghost"]
    assert ghost["state"] == "unreachable" and "no alive Ray node has labels" in ghost["reason"]
    for i in range(3):
        rec = nodes[f"node-{i}"]
        assert rec["state"] == "ok", rec
        assert rec["ran_on"] == rec["ray_node_id"] == fleet.nodes[i].node_id
        assert rec["verify"]["ok"] and (out / f"node-{i}" / "run" / "SHA256SUMS").exists()
        cap = json.loads((out / f"node-{i}" / "capability.json").read_text())
        assert cap["node"]["ray_node_id"] == fleet.nodes[i].node_id and cap["node"]["node_id"] == f"node-{i}"
    for i in range(3):  # each node's figures are its own server's: every fake served its node's requests
        run_json = json.loads((out / f"node-{i}" / "run" / "run.json").read_text())
        assert run_json["config"]["lanes"][0]["runtime"]["url"] == fleet.fakes[f"node-{i}"].base_url
    deployments = yaml.safe_load((out / "litellm.yaml").read_text())["model_list"]
    assert [d["model_info"]["id"] for d in deployments] == [f"node-{i}/{LANE}" for i in range(3)]
    assert {d["model_name"] for d in deployments} == {LANE}  # a string, not True
    bases = [d["litellm_params"]["api_base"] for d in deployments]
    assert len(set(bases)) == 3 and all(b.endswith("/v1") and "127.0.0.1" not in b for b in bases)
    assert "ghost: unreachable" in capsys.readouterr().out


def test_a_node_lost_mid_run_is_recorded_and_the_others_are_kept(fleet):
    from satbench.cli.lanefile import load_lane_file
    from satbench.cli.main import fleet_node_sweep
    from satbench.fleet.inventory import load_inventory
    from satbench.fleet.run import run_fleet

    doomed = fleet.cluster.add_node(num_cpus=1, labels={"satbench/node": "doomed"})
    fleet.cluster.wait_for_nodes()
    inv_path = fleet.inventory("lost", [fleet.entry("node-0", 'labels = { "satbench/node" = "n0" }'),
                                        fleet.entry("doomed", 'labels = { "satbench/node" = "doomed" }',
                                                    decode_ms=60.0)])
    seen: list[dict] = []
    removed = threading.Event()

    def watch(snapshot: dict) -> None:
        seen.append(snapshot.get("doomed", {}))
        if not removed.is_set() and "level" in snapshot.get("doomed", {}):
            removed.set()  # the live view showed its lane and level: it is mid-run
            fleet.cluster.remove_node(doomed, allow_graceful=False)

    inv = load_inventory(inv_path)
    record = run_fleet(inv, inv_path, load_lane_file(fleet.tmp / "lanes.toml"), fleet.tmp / "lanes.toml",
                       fleet.tmp / "lost", fleet_node_sweep, show_progress=False, on_progress=watch)
    nodes = {n.node_id: n for n in record.nodes}
    assert removed.is_set() and any(s.get("lane") == LANE for s in seen)
    assert nodes["doomed"].state == "lost" and "died" in (nodes["doomed"].reason or ""), nodes["doomed"]
    assert nodes["node-0"].state == "ok" and record.merged == ["node-0"]
    assert json.loads((fleet.tmp / "lost" / "fleet.json").read_text())["nodes"][1]["state"] == "lost"


def test_the_central_verify_refuses_a_run_altered_on_its_way(fleet):
    """A node whose run directory does not verify (here: a derived file edited after the report) is
    kept as run.rejected, recorded, and left out of the merge."""
    from satbench.cli.lanefile import load_lane_file
    from satbench.fleet.inventory import load_inventory
    from satbench.fleet.run import run_fleet

    inv_path = fleet.inventory("verify", [fleet.entry("node-0", 'labels = { "satbench/node" = "n0" }'),
                                          fleet.entry("node-1", 'labels = { "satbench/node" = "n1" }')],
                              max_parallel=1)  # one node at a time: the second waits in the queue
    port = fleet.fakes["node-1"].base_url.rsplit(":", 1)[1]

    def tampering_sweep(cfg, run_dir, progress):  # a closure: Ray ships it by value
        from satbench.cli.main import fleet_node_sweep

        code, error = fleet_node_sweep(cfg, run_dir, progress)
        if cfg.lanes[0].runtime.url.endswith(f":{port}"):
            with open(run_dir / "results.json", "a") as fh:
                fh.write(" ")
        return code, error

    record = run_fleet(load_inventory(inv_path), inv_path, load_lane_file(fleet.tmp / "lanes.toml"),
                       fleet.tmp / "lanes.toml", fleet.tmp / "verify", tampering_sweep, show_progress=False)
    nodes = {n.node_id: n for n in record.nodes}
    assert nodes["node-1"].state == "rejected" and "failed central verification" in nodes["node-1"].reason
    assert any("results.json" in p for p in nodes["node-1"].verify.problems)
    assert (fleet.tmp / "verify" / "node-1" / "run.rejected").is_dir()
    assert not (fleet.tmp / "verify" / "node-1" / "capability.json").exists()
    assert nodes["node-0"].state == "ok" and record.merged == ["node-0"]


def test_per_class_spot_checks_a_class_and_measures_a_slow_node_in_full(fleet, capsys):
    """All three nodes have this machine's fingerprint: node-0 is measured in full, node-1 (as fast) is
    spot-checked and advertised on node-0's evidence, node-2 (its server's decode 3× slower) is significantly
    slower by `compare`, so it is measured in full and flagged. One task at a time: these "nodes" share
    this host's cores, and two spot checks at once would each run slower than the reference did alone."""
    inv = fleet.inventory("classes", max_parallel=1, entries=[
        fleet.entry("ref-0", 'labels = { "satbench/node" = "n0" }', decode_ms=CLASS_FAST_MS),
        fleet.entry("same-1", 'labels = { "satbench/node" = "n1" }', decode_ms=CLASS_FAST_MS),
        fleet.entry("slow-2", 'labels = { "satbench/node" = "n2" }', decode_ms=CLASS_SLOW_MS),
        f"[spot_check]\nrepetitions = {CLASS_REPS}\nmin_effect = 0.3\n"], lanes=CLASS_LANES,
        timeout_s=180)  # the reference's run: 11 s alone here, 90+ s beside 3 busy loops
    capsys.readouterr()
    code, nodes, out = run(fleet, inv, "classes", "--per-class", "--json")
    assert code == 0, nodes
    doc = json.loads(capsys.readouterr().out)  # --json: one document on stdout, the progress on stderr
    assert main(["schema", "output-fleet-run"]) == 0
    jsonschema.validate(doc, json.loads(capsys.readouterr().out))
    assert doc["exit_code"] == 0 and doc["record"] == json.loads((out / "fleet.json").read_text())
    ref, same, slow = nodes["ref-0"], nodes["same-1"], nodes["slow-2"]
    assert ref["mode"] == "full" and ref["class_reference"] == "ref-0"
    assert same["mode"] == "spot" and same["spot"]["slower"] is False, same["spot"]
    assert same["class_reference"] == "ref-0"
    assert (out / "same-1" / "spot").is_dir() and not (out / "same-1" / "run").exists()
    cap = json.loads((out / "same-1" / "capability.json").read_text())
    assert cap["lanes"][0]["evidence"]["recommendations_file"] == "ref-0/run/recommendations.json"
    assert slow["mode"] == "spot+full" and slow["spot"]["slower"] is True, slow["spot"]
    assert slow["flags"] and "significantly slower than its class reference" in slow["flags"][0]
    assert (out / "slow-2" / "spot").is_dir() and (out / "slow-2" / "run").is_dir()
    cap = json.loads((out / "slow-2" / "capability.json").read_text())
    assert cap["lanes"][0]["evidence"]["recommendations_file"] == "slow-2/run/recommendations.json"
