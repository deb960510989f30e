"""A fleet run on a local multi-node Ray cluster, no GPU and no download: N simulated nodes
(ray.cluster_utils.Cluster, each with its own label), each with its own fake llama.cpp server
(tests/fakes/fake_llama_server.py, a scripted continuous-batching scheduler) reached through a url
lane on that node. Prints the merged LiteLLM config and the costs fleet.json records.

    pip install -e '.[fleet]'
    python examples/fleet/local_cluster.py [--nodes 3] [--parallel 1] [--per-class] [-o fleet-demo]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FAKE = ROOT / "tests" / "fakes" / "fake_llama_server.py"
LANES = """[[lanes]]
name = "chat"
runtime = "url"
url = "http://127.0.0.1:1"        # each node's own URL comes from the inventory (urls)
concurrency = [1, 2, 4]
repetitions = 3
requests_per_level = 12
prompt_tokens = 32
output_tokens = 16
"""


def start_fake(tmp: Path, n_slots: int, decode_ms: float) -> tuple[subprocess.Popen, str]:
    script, ready = tmp / "script.json", tmp / "ready.json"
    script.write_text(json.dumps({"n_slots": n_slots, "decode_iteration_ms": decode_ms}))
    proc = subprocess.Popen([sys.executable, str(FAKE), "--port", "0", "--script", str(script),
                             "--ready-file", str(ready)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    while not ready.exists():
        time.sleep(0.05)
    return proc, json.loads(ready.read_text())["base_url"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--per-class", action="store_true")
    ap.add_argument("--parallel", type=int, default=1, help="nodes measured at once (max_parallel)")
    ap.add_argument("-o", "--output", default="fleet-demo")
    a = ap.parse_args()
    import ray
    from ray.cluster_utils import Cluster

    from satbench.cli.main import main as satbench

    t0 = time.monotonic()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    for i in range(a.nodes):
        cluster.add_node(num_cpus=1, labels={"satbench/node": f"n{i}"})
    ray.init(address=cluster.address, log_to_driver=False)
    cluster.wait_for_nodes()
    started = time.monotonic() - t0
    tmp = Path(tempfile.mkdtemp(prefix="satbench-fleet-demo-"))
    fakes, entries = [], []
    for i in range(a.nodes):
        (tmp / f"fake{i}").mkdir()
        # node i's server: 4 slots, one node in three with half the decode speed
        proc, url = start_fake(tmp / f"fake{i}", 4, 8.0 if i % 3 == 2 else 4.0)
        fakes.append(proc)
        entries.append(f'[[nodes]]\nname = "node-{i}"\nlabels = {{ "satbench/node" = "n{i}" }}\n'
                       f'urls = {{ chat = "{url}" }}\n')
    (tmp / "lanes.toml").write_text(LANES)
    # the simulated nodes share this machine: measured one at a time, no node's sweep contends with another's
    (tmp / "fleet.toml").write_text(f'lanes = "lanes.toml"\ntimeout_s = 300\nmax_parallel = {a.parallel}\n\n'
                                    + "\n".join(entries))
    try:
        code = satbench(["fleet", "run", "--inventory", str(tmp / "fleet.toml"), "-o", a.output]
                        + (["--per-class"] if a.per_class else []))
    finally:
        for proc in fakes:
            proc.terminate()
        ray.shutdown()
        cluster.shutdown()
    record = json.loads((Path(a.output) / "fleet.json").read_text())
    print(f"\nRay cluster of {a.nodes} nodes + head started in {started:.1f} s")
    print(f"fleet run: wall {record['wall_s']} s, driver CPU {record['driver_cpu_s']} s, "
          f"probe round {record['probe_s']} s")
    for n in record["nodes"]:
        print(f"  {n['node_id']}: {n['state']} {n['mode']}, sweep {n['sweep_s']} s, task {n['task_s']} s, "
              f"{n['transfer_bytes']} bytes back, store+verify {n['store_s']} s")
    print("\n" + (Path(a.output) / "litellm.yaml").read_text())
    return code


if __name__ == "__main__":
    sys.exit(main())
