"""Capacity-aware routing for LiteLLM's Router over the config `fleet merge --format litellm` writes.

LiteLLM holds each deployment to its `max_parallel_requests` (satbench's measured concurrency on that
node) and refuses a request beyond it with a 429 (RateLimitError). Its built-in strategies pick a
deployment without looking at its free slots, so some requests are refused while other nodes still
have room, below the advertised total (`benchmarks/litellm_router.py` measures how many).

`CapacityRouting` picks, for each request, the lane's deployment with the lowest share of its slots
in use (ties: the higher `weight`, then the config's order). When every deployment of the lane is
full, the request waits in the router, first come first served, for at most `wait_s` seconds, and is
refused after that with LiteLLM's RateLimitError. Use it with the Router in Python:

    router = Router(model_list=yaml.safe_load(text)["model_list"])
    CapacityRouting.install(router)

A deployment's requests in flight are LiteLLM's own count (the `max_parallel_requests` slot it holds
from the attempt's start until the answer or stream ends, a cancelled or closed one included) plus
this strategy's picks LiteLLM has not started yet. A pick is named in the request's metadata
(`satbench_pick`) and leaves the second count when LiteLLM starts its attempt (`log_pre_api_call`) or
ends it (success or failure callback), or after `pending_s` seconds if it does neither.

Invariants: the strategy never picks a deployment whose count has reached its
`max_parallel_requests`; a waiting request is picked as soon as it is first in line and a slot is
free (checked on every callback and every RECHECK_S). The counts are this router's: two routers, in
one process or two, do not see each other's requests.

Needs the `router` extra (LiteLLM, pinned to the version this was tested with).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
import weakref
from collections import defaultdict, deque
from collections.abc import Mapping
from typing import Any

from litellm.exceptions import RateLimitError
from litellm.integrations.custom_logger import CustomLogger
from litellm.types.router import CustomRoutingStrategyBase

DEFAULT_WAIT_S = 600.0  # LiteLLM's default request timeout
DEFAULT_PENDING_S = 60.0  # a pick LiteLLM neither started nor ended by then no longer counts
RECHECK_S = 0.05  # a waiting request looks again this often (a cancelled request sends no callback)


def slots_of(deployment: Mapping[str, Any]) -> int:
    """The deployment's `max_parallel_requests` (1 where the config gives none)."""
    return max(1, int(deployment["litellm_params"].get("max_parallel_requests") or 1))


def deployment_id(deployment: Mapping[str, Any]) -> str:
    return str(deployment["model_info"]["id"])


PICK_KEY = "satbench_pick"  # the request metadata key naming the strategy's pick


def attempt_pick(kwargs: Mapping[str, Any]) -> str | None:
    """The pick a finished attempt carried, from LiteLLM's callback kwargs."""
    params = kwargs.get("litellm_params") or {}
    for metadata in (params.get("metadata"), params.get("litellm_metadata")):
        if isinstance(metadata, Mapping) and isinstance(metadata.get(PICK_KEY), str):
            return metadata[PICK_KEY]
    return None


class _Lane:
    """One lane's waiting line (first come, first served), with one Condition per event loop."""

    def __init__(self) -> None:
        self.queue: deque[object] = deque()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.freed: asyncio.Condition | None = None

    def condition(self) -> asyncio.Condition:
        loop = asyncio.get_running_loop()
        if self.freed is None or self.loop is not loop:
            self.loop, self.freed = loop, asyncio.Condition()
        return self.freed


class _Releases(CustomLogger):
    """The one LiteLLM callback every CapacityRouting of this process shares, registered once (with a
    callback per strategy, a second strategy's was never called in the tests: LiteLLM keeps one)."""

    def __init__(self) -> None:
        super().__init__()
        self.strategies: weakref.WeakSet[CapacityRouting] = weakref.WeakSet()

    def log_pre_api_call(self, model: Any, messages: Any, kwargs: Any) -> None:
        for strategy in list(self.strategies):
            strategy.started(kwargs)

    async def _release(self, kwargs: Mapping[str, Any]) -> None:
        for strategy in list(self.strategies):
            await strategy.release(kwargs)

    async def async_log_success_event(self, kwargs: Any, response_obj: Any, start_time: Any,
                                      end_time: Any) -> None:
        await self._release(kwargs)

    async def async_log_failure_event(self, kwargs: Any, response_obj: Any, start_time: Any,
                                      end_time: Any) -> None:
        await self._release(kwargs)


_RELEASES = _Releases()


class CapacityRouting(CustomRoutingStrategyBase):
    """LiteLLM's custom routing strategy (see the module docstring)."""

    def __init__(self, router: Any, wait_s: float = DEFAULT_WAIT_S,
                 pending_s: float = DEFAULT_PENDING_S) -> None:
        self.router = router
        self.wait_s = wait_s
        self.pending_s = pending_s
        self.picks: dict[str, dict[str, float]] = defaultdict(dict)  # deployment id → {pick: monotonic s}
        self.lanes: dict[str, _Lane] = defaultdict(_Lane)

    @classmethod
    def install(cls, router: Any, **kwargs: float) -> CapacityRouting:
        """Make a strategy and register it as `router`'s routing strategy; LiteLLM's success and
        failure callbacks return its picks (_Releases)."""
        import litellm

        strategy = cls(router, **kwargs)
        if _RELEASES not in litellm.callbacks:
            litellm.callbacks.append(_RELEASES)
        _RELEASES.strategies.add(strategy)
        router.register_plugin(strategy)
        return strategy

    def started_by_litellm(self, deployment: Mapping[str, Any]) -> int:
        """The requests LiteLLM holds a `max_parallel_requests` slot of the deployment for (0 before
        its first request: LiteLLM makes the slot counter then)."""
        key = f"{deployment_id(deployment)}_max_parallel_requests_client"
        limit = self.router.health().store.get_cache(key=key, local_only=True)
        return int(getattr(limit, "in_flight", 0) or 0)

    def in_flight(self, deployment: Mapping[str, Any]) -> int:
        """LiteLLM's count of the deployment's requests plus this strategy's picks not started yet."""
        picks = self.picks[deployment_id(deployment)]
        limit = time.monotonic() - self.pending_s
        for pick in [p for p, at in picks.items() if at < limit]:
            del picks[pick]
        return self.started_by_litellm(deployment) + len(picks)

    def _take(self, model: str, request_kwargs: Any = None) -> dict | None:
        """The lane's deployment with the lowest share of its slots in use, counted as picked and the
        pick named in `request_kwargs`' metadata; None when every one is full."""
        deployments = self.router.registry().deployments(model)
        if not deployments:
            raise ValueError(f"no deployment serves {model!r}")
        counts = [self.in_flight(d) for d in deployments]
        free = [(n / slots_of(d), -float(d["litellm_params"].get("weight") or 1), i)
                for i, (d, n) in enumerate(zip(deployments, counts)) if n < slots_of(d)]
        if not free:
            return None
        chosen = deployments[min(free)[2]]
        pick = uuid.uuid4().hex
        self.picks[deployment_id(chosen)][pick] = time.monotonic()
        if isinstance(request_kwargs, dict):
            metadata = request_kwargs.setdefault("metadata", {})
            if isinstance(metadata, dict):
                metadata[PICK_KEY] = pick
        return chosen

    def _refused(self, model: str) -> RateLimitError:
        return RateLimitError(message=f"satbench CapacityRouting: every deployment of {model} stayed full "
                                      f"for {self.wait_s:g} s", llm_provider="", model=model)

    async def async_get_available_deployment(  # type: ignore[override]  # LiteLLM's base says -> None
            self, model: str, messages: Any = None, input: Any = None,
            specific_deployment: bool | None = False, request_kwargs: Any = None) -> dict:
        lane = self.lanes[model]
        freed = lane.condition()
        me = object()
        picked: list[dict] = []

        def my_turn() -> bool:
            chosen = self._take(model, request_kwargs) if lane.queue[0] is me else None
            if chosen is not None:
                picked.append(chosen)
            return chosen is not None

        deadline = time.monotonic() + self.wait_s
        async with freed:
            lane.queue.append(me)
            try:
                while not my_turn():
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise self._refused(model)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(freed.wait(), min(left, RECHECK_S))
            finally:
                lane.queue.remove(me)
                freed.notify_all()
        return picked[0]

    def get_available_deployment(  # type: ignore[override]  # LiteLLM's base says -> None
            self, model: str, messages: Any = None, input: Any = None,
            specific_deployment: bool | None = False, request_kwargs: Any = None) -> dict:
        """The synchronous pick: a free deployment now, or LiteLLM's RateLimitError (no waiting)."""
        chosen = self._take(model, request_kwargs)
        if chosen is None:
            raise self._refused(model)
        return chosen

    def started(self, kwargs: Mapping[str, Any]) -> None:
        """LiteLLM started the attempt carrying a pick: its own count has it from now on."""
        pick = attempt_pick(kwargs)
        mine = next((picks for picks in self.picks.values() if pick in picks), None)
        if pick is not None and mine is not None:
            del mine[pick]

    async def release(self, kwargs: Mapping[str, Any]) -> None:
        """An attempt ended: its pick, if LiteLLM never started it, no longer counts; wake the
        requests waiting for a slot."""
        self.started(kwargs)
        for lane in self.lanes.values():
            if lane.freed is not None and lane.loop is asyncio.get_running_loop():
                async with lane.freed:
                    lane.freed.notify_all()
