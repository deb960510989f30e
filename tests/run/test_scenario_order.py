"""Which scenario the sweep runs when (run.sweep.run_scenarios), over one context: each lane's checks
first where they cap its climb, its solo scenario, then all lanes together, then the checks left."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from satbench.config.schema import LaneConfig, RunConfig
from satbench.errors import RuntimeStartError
from satbench.run import sweep


def _cfg(**run) -> RunConfig:
    lanes = [LaneConfig.model_validate({"name": "a", "adaptive": {}}),
             LaneConfig.model_validate({"name": "b"})]
    return RunConfig(lanes=lanes, **run)


def _order(monkeypatch, cfg: RunConfig, solo_fails: str | None = None) -> list[str]:
    ran: list[str] = []

    class Fairness:
        def __init__(self, ctx) -> None: ...

        async def run(self, lane, stop_at_fail: bool = False) -> None:
            ran.append(f"fairness {lane.name}{' (stops at a fail)' if stop_at_fail else ''}")

    class Together:
        def __init__(self, ctx) -> None: ...

        async def run(self) -> None:
            ran.append("together")

    async def solo(ctx, lane) -> None:
        if lane.name == solo_fails:
            raise RuntimeStartError("no start")
        ran.append(f"solo {lane.name}")

    monkeypatch.setattr(sweep, "Fairness", Fairness)
    monkeypatch.setattr(sweep, "Together", Together)
    monkeypatch.setattr(sweep, "solo", solo)
    ctx = SimpleNamespace(cfg=cfg, failures=SimpleNamespace(nothing_measured_error=lambda: None),
                          lane_did_not_start=lambda lane, scenario, exc: ran.append(f"{scenario} {lane.name} "
                                                                                   "did not start"))
    asyncio.run(sweep.run_scenarios(ctx))  # type: ignore[arg-type]
    return ran


def test_checks_that_cap_a_climb_come_first_and_the_rest_last(monkeypatch):
    assert _order(monkeypatch, _cfg(with_fairness=True, together=True)) == [
        "fairness a (stops at a fail)", "solo a", "solo b", "together", "fairness b"]


def test_fairness_only_runs_every_lanes_checks_alone(monkeypatch):
    assert _order(monkeypatch, _cfg(fairness_only=True, together=True)) == ["fairness a", "fairness b"]


def test_a_lane_that_does_not_start_is_recorded_and_the_next_runs(monkeypatch):
    assert _order(monkeypatch, _cfg(), solo_fails="a") == ["solo a did not start", "solo b"]


def test_a_run_that_measured_nothing_says_so(monkeypatch):
    cfg = _cfg()
    none = SimpleNamespace(nothing_measured_error=lambda: RuntimeStartError("none"))
    ctx = SimpleNamespace(cfg=cfg, failures=none)

    async def solo(ctx, lane) -> None: ...

    monkeypatch.setattr(sweep, "solo", solo)
    with pytest.raises(RuntimeStartError, match="none"):
        asyncio.run(sweep.run_scenarios(ctx))  # type: ignore[arg-type]
