"""The LiteLLM config `fleet merge` writes, loaded into LiteLLM's own Router and driven against fake
llama.cpp nodes: at the advertised total concurrency every request succeeds and no node gets more
than its measured concurrency (CapacityRouting); above it, requests wait in the router; and
LiteLLM itself refuses a request beyond a deployment's max_parallel_requests, as docs/fleet.md says."""

from __future__ import annotations

import asyncio
import os
import time

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch of LiteLLM's price list

import pytest
import yaml
from litellm import Router
from litellm.exceptions import RateLimitError

from satbench.capability.report import api_base_env
from satbench.cli.main import main
from satbench.fleet.litellm_routing import CapacityRouting
from tests.fakes.fake_llama_server import peak_in_flight
from tests.fleet.reports import lane, report, write

CAPS = {"node-a": 3, "node-b": 2, "node-c": 1}
CAP_VALUES = tuple(CAPS.values())


@pytest.fixture
def nodes(fake_server, tmp_path, capsys, monkeypatch):
    """Fake nodes with 3, 2 and 1 slots, each measured at its slot count; (LiteLLM model_list, fakes)."""
    def start(caps=CAP_VALUES, decode_ms=4.0):
        fakes, paths = {}, []
        for i, cap in enumerate(caps):
            name = f"node-{'abc'[i]}"
            fakes[name] = fake_server(n_slots=cap, decode_iteration_ms=decode_ms)
            monkeypatch.setenv(api_base_env(name, "dense"), fakes[name].base_url + "/v1")
            paths.append(write(tmp_path, name, report(name, [lane("dense", cap, 30.0 * cap)], api_base={})))
        capsys.readouterr()
        assert main(["fleet", "merge", *map(str, paths), "--format", "litellm"]) == 0
        return yaml.safe_load(capsys.readouterr().out)["model_list"], fakes
    return start


def drive(router: Router, streams: int, rounds: int, stream: bool = False, max_tokens: int = 8) -> list:
    """`streams` closed-loop users, `rounds` chat requests each: every outcome, an exception or the
    deployment id that served it."""
    async def one(i: int):
        try:
            r = await router.acompletion(model="dense", messages=[{"role": "user", "content": f"q{i}"}],
                                         max_tokens=max_tokens, stream=stream)
            if stream:
                assert [chunk async for chunk in r]
            return "ok"
        except Exception as exc:  # the outcome is the data
            return exc

    async def user(u: int):
        return [await one(u * 1000 + k) for k in range(rounds)]

    async def everyone():
        return [x for xs in await asyncio.gather(*(user(u) for u in range(streams))) for x in xs]
    return asyncio.run(everyone())


@pytest.mark.parametrize("stream", [False, True])
def test_at_the_advertised_total_every_request_succeeds(nodes, stream):
    model_list, fakes = nodes()
    router = Router(model_list=model_list, num_retries=0)
    CapacityRouting.install(router)
    outcomes = drive(router, streams=6, rounds=6, stream=stream)  # 6 = 3 + 2 + 1, the lane's total
    assert outcomes == ["ok"] * 36, [o for o in outcomes if o != "ok"][:3]
    served = {name: fake.stop() for name, fake in fakes.items()}
    assert all(peak_in_flight(served[name]) <= cap for name, cap in CAPS.items())
    assert sum(map(len, served.values())) == 36


def test_above_the_total_requests_wait_in_the_router_and_no_node_takes_more(nodes):
    model_list, fakes = nodes()
    router = Router(model_list=model_list, num_retries=0)
    CapacityRouting.install(router)
    outcomes = drive(router, streams=10, rounds=4)
    assert outcomes == ["ok"] * 40
    served = {name: fake.stop() for name, fake in fakes.items()}
    assert all(peak_in_flight(served[name]) <= cap for name, cap in CAPS.items())
    # the busier share goes to the node with more slots
    assert len(served["node-a"]) > len(served["node-c"])


def test_a_request_that_waits_longer_than_wait_s_is_refused(nodes):
    model_list, _ = nodes(caps=(1,), decode_ms=100.0)
    router = Router(model_list=model_list, num_retries=0)
    CapacityRouting.install(router, wait_s=0.05)
    outcomes = drive(router, streams=2, rounds=1, max_tokens=16)
    refused = [o for o in outcomes if o != "ok"]
    assert outcomes.count("ok") == 1 and len(refused) == 1
    assert isinstance(refused[0], RateLimitError) and "stayed full for 0.05 s" in str(refused[0])


def test_litellm_refuses_a_request_beyond_max_parallel_requests(nodes):
    """What docs/fleet.md and the YAML header state for LiteLLM's built-in strategies."""
    model_list, fakes = nodes(caps=(1,), decode_ms=100.0)
    router = Router(model_list=model_list, num_retries=0)
    outcomes = drive(router, streams=2, rounds=1, max_tokens=16)
    refused = [o for o in outcomes if o != "ok"]
    assert outcomes.count("ok") == 1 and len(refused) == 1
    assert isinstance(refused[0], RateLimitError) and "max_parallel_requests" in str(refused[0])
    assert len(fakes["node-a"].stop()) == 1  # the refused request never reached the node


def test_a_closed_stream_and_a_cancelled_request_free_their_slot(nodes):
    """LiteLLM sends no callback for either: the slot count is LiteLLM's own, which they leave."""
    model_list, fakes = nodes(caps=(1,), decode_ms=20.0)
    router = Router(model_list=model_list, num_retries=0)
    strategy = CapacityRouting.install(router, wait_s=10.0)
    ask = {"model": "dense", "messages": [{"role": "user", "content": "q"}], "max_tokens": 40}

    async def scenario() -> list[int]:
        seen = []
        stream = await router.acompletion(**ask, stream=True)
        async for _ in stream:
            break
        await stream.aclose()
        task = asyncio.create_task(router.acompletion(**ask))
        await asyncio.sleep(0.3)  # admitted and decoding
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for deployment in router.registry().deployments("dense"):
            seen.append(strategy.in_flight(deployment))
        started = time.monotonic()
        await router.acompletion(**ask)  # would wait out wait_s, then fail, on a leaked slot
        seen.append(round(time.monotonic() - started))
        return seen
    assert asyncio.run(scenario()) == [0, 1]  # nothing in flight; the last answer took ~0.8 s
    assert len(fakes["node-a"].stop()) == 3


class _Limit:
    def __init__(self, in_flight: int) -> None:
        self.in_flight = in_flight


class _Store:
    def __init__(self) -> None:
        self.limits: dict[str, _Limit] = {}

    def get_cache(self, key, local_only=False):
        return self.limits.get(key.removesuffix("_max_parallel_requests_client"))


class _Registry:
    def __init__(self, deployments):
        self.all = deployments

    def deployments(self, model):
        return [d for d in self.all if d["model_name"] == model]


class _Router:
    """What CapacityRouting reads of LiteLLM's Router: its deployments, and its slot counters."""

    def __init__(self, caps, weights=None):
        weights = weights or [1] * len(caps)
        self._registry = _Registry([{"model_name": "dense", "model_info": {"id": f"n{i}/dense"},
                                     "litellm_params": {"max_parallel_requests": c, "weight": w}}
                                    for i, (c, w) in enumerate(zip(caps, weights))])
        self.store = _Store()

    def registry(self):
        return self._registry

    def health(self):
        return self


def test_picks_fill_each_node_in_proportion_to_its_slots_and_never_past_them():
    strategy = CapacityRouting(_Router([4, 2, 2], weights=[1, 5, 1]))
    picks = [strategy.get_available_deployment("dense")["model_info"]["id"] for _ in range(8)]
    # the lowest share in use first; at equal shares the higher weight, then the config's order
    assert picks == ["n1/dense", "n0/dense", "n2/dense", "n0/dense", "n1/dense", "n0/dense", "n2/dense",
                     "n0/dense"]
    with pytest.raises(RateLimitError, match="stayed full"):
        strategy.get_available_deployment("dense")


def test_litellms_own_count_and_the_picks_it_has_not_started_add_up():
    router = _Router([2, 1])
    strategy = CapacityRouting(router)
    router.store.limits["n0/dense"] = _Limit(1)  # a request LiteLLM runs on n0 (another pick's, or a retry)
    request: dict = {}
    first = strategy.get_available_deployment("dense", request_kwargs=request)
    assert first["model_info"]["id"] == "n1/dense"
    assert strategy.get_available_deployment("dense")["model_info"]["id"] == "n0/dense"
    with pytest.raises(RateLimitError):  # n0: 1 started + 1 picked; n1: 1 picked
        strategy.get_available_deployment("dense")
    router.store.limits["n1/dense"] = _Limit(1)  # LiteLLM starts the first pick's attempt...
    strategy.started({"litellm_params": {"metadata": request["metadata"]}})
    with pytest.raises(RateLimitError):  # ...which now counts once, as LiteLLM's
        strategy.get_available_deployment("dense")
    router.store.limits["n1/dense"] = _Limit(0)  # and ends it
    assert strategy.get_available_deployment("dense")["model_info"]["id"] == "n1/dense"


def test_a_pick_litellm_never_started_is_dropped_after_pending_s(monkeypatch):
    import satbench.fleet.litellm_routing as routing

    clock = [100.0]
    monkeypatch.setattr(routing.time, "monotonic", lambda: clock[0])
    strategy = CapacityRouting(_Router([1]), pending_s=30.0)
    strategy.get_available_deployment("dense")
    with pytest.raises(RateLimitError):
        strategy.get_available_deployment("dense")
    clock[0] += 31.0
    assert strategy.get_available_deployment("dense")["model_info"]["id"] == "n0/dense"


def test_a_callback_ends_only_the_pick_its_attempt_carried_and_no_other_routers():
    strategy, other = CapacityRouting(_Router([1, 1])), CapacityRouting(_Router([1, 1]))
    requests = [{"metadata": {}}, {"metadata": {}}]
    for request in requests:
        strategy.get_available_deployment("dense", request_kwargs=request)
    other.get_available_deployment("dense", request_kwargs={})
    finished = {"litellm_params": {"metadata": requests[1]["metadata"]}}  # it ran on n1
    for router in (other, strategy):
        asyncio.run(router.release(finished))
        asyncio.run(router.release({"litellm_params": {"metadata": {"satbench_pick": "unknown"}}}))
    assert strategy.get_available_deployment("dense")["model_info"]["id"] == "n1/dense"
    assert other.get_available_deployment("dense")["model_info"]["id"] == "n1/dense"  # n0 still its own
    with pytest.raises(RateLimitError):
        other.get_available_deployment("dense")
