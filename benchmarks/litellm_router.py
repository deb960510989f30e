"""LiteLLM's Router over the config `satbench fleet merge --format litellm` writes, driven against fake
llama.cpp nodes: how many requests each routing strategy refuses at the lane's advertised total
concurrency and above it, and the most requests any node held at once against its measured figure.

Three fake nodes (tests/fakes/fake_llama_server.py, each its own process) with 4, 2 and 8 slots, each
advertised at its slot count (total 14). `--streams` closed-loop users send `--rounds` chat requests
each through one Router (num_retries as given); a refused request is LiteLLM's RateLimitError
(429). LiteLLM's built-in strategies are compared with satbench.fleet.litellm_routing.CapacityRouting.

    python benchmarks/litellm_router.py [--loads 14,21] [--rounds 10] [--retries 0,3]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import sys
import tempfile
from collections import Counter
from contextlib import redirect_stdout
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch of LiteLLM's price list
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402
from benchmarks.fake_proc import start_fake, stop_fake  # noqa: E402
from litellm import Router  # noqa: E402
from tests.fakes.fake_llama_server import peak_in_flight  # noqa: E402
from tests.fleet.reports import lane, report, write  # noqa: E402

from satbench.capability.report import api_base_env  # noqa: E402
from satbench.cli.main import main as satbench  # noqa: E402
from satbench.fleet.litellm_routing import CapacityRouting  # noqa: E402

CAPS = {"node-a": 4, "node-b": 2, "node-c": 8}
STRATEGIES = ["simple-shuffle", "least-busy", "usage-based-routing-v2", "latency-based-routing", "capacity"]


def _schedule(log: Path) -> list[dict]:
    import json

    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def model_list(tmp: Path) -> tuple[list[dict], dict]:
    fakes, paths = {}, []
    for name, cap in CAPS.items():
        log = tmp / f"{name}.schedule.jsonl"
        proc, url = start_fake({"n_slots": cap, "decode_iteration_ms": 20.0, "schedule_log": str(log)}, tmp,
                               name)
        fakes[name] = (proc, log)
        os.environ[api_base_env(name, "dense")] = url + "/v1"
        paths.append(write(tmp, name, report(name, [lane("dense", cap, 30.0 * cap)], api_base={})))
    out = io.StringIO()
    with redirect_stdout(out):
        assert satbench(["fleet", "merge", *map(str, paths), "--format", "litellm"]) == 0
    return yaml.safe_load(out.getvalue())["model_list"], fakes


async def drive(router: Router, streams: int, rounds: int) -> Counter:
    async def one(i: int) -> str:
        try:
            await router.acompletion(model="dense", messages=[{"role": "user", "content": f"q{i}"}],
                                     max_tokens=16)
            return "ok"
        except Exception as exc:  # noqa: BLE001  # the outcome is the data
            return type(exc).__name__

    async def user(u: int) -> list[str]:
        return [await one(u * 1000 + k) for k in range(rounds)]
    return Counter(x for xs in await asyncio.gather(*(user(u) for u in range(streams))) for x in xs)


def case(strategy: str, streams: int, rounds: int, retries: int) -> str:
    with tempfile.TemporaryDirectory() as d:
        models, fakes = model_list(Path(d))
        try:
            if strategy == "capacity":
                router = Router(model_list=models, num_retries=retries)
                CapacityRouting.install(router)
            else:
                router = Router(model_list=models, routing_strategy=strategy, num_retries=retries)
            outcomes = asyncio.run(drive(router, streams, rounds))
        finally:
            for proc, _ in fakes.values():
                stop_fake(proc)
        peaks = " ".join(f"{peak_in_flight(_schedule(log))}/{CAPS[n]}" for n, (_, log) in fakes.items())
    total = sum(outcomes.values())
    refused = total - outcomes["ok"]
    return (f"{strategy:<24} {streams:>7} {retries:>7} {total:>8} {outcomes['ok']:>6} {refused:>8} "
            f"{100 * refused / total:>8.1f}  {peaks}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--loads", default="14,21", help="closed-loop users (14: the lane's advertised total)")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--retries", default="0,3", help="LiteLLM's num_retries, each a case")
    ap.add_argument("--strategies", default=",".join(STRATEGIES))
    a = ap.parse_args()
    from importlib.metadata import version

    print(f"LiteLLM {version('litellm')}; nodes (slots = "
          f"advertised max_parallel_requests): {CAPS}; {a.rounds} requests per user")
    print(f"{'strategy':<24} {'users':>7} {'retries':>7} {'requests':>8} {'ok':>6} {'refused':>8} "
          f"{'refused%':>8}  peak in flight / advertised (a b c)")
    for load in map(int, a.loads.split(",")):
        for retries in map(int, a.retries.split(",")):
            for strategy in a.strategies.split(","):
                print(case(strategy, load, a.rounds, retries), flush=True)


if __name__ == "__main__":
    main()
