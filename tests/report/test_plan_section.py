"""EVIDENCE.md's "How the levels were chosen": every decision of an adaptive lane, and its shortcuts."""

from __future__ import annotations

from satbench.config.schema import AdaptiveConfig, SloConfig
from satbench.records.manifest import PlanDecision
from satbench.report.document import Bullets, TableBlock
from satbench.report.evidence_findings import plan_section
from tests.report.test_compare import lane, results


def _adaptive(slo: SloConfig | None):
    ln = lane().model_copy(update={"slo": slo, "plan": [
        PlanDecision(action="measure", level=1, repetition=1, reason="starts at N=1", elapsed_s=0.0),
        PlanDecision(action="stop", reason="N=4 reaches the server's 4 slots", elapsed_s=9.0)]})
    res = results(ln)
    res.config.lanes[0].adaptive = AdaptiveConfig()
    return plan_section(res)


def test_every_decision_is_listed_with_its_reason():
    blocks = _adaptive(None)
    table = next(b for b in blocks if isinstance(b, TableBlock))
    assert [row[1] for row in table.rows] == ["measure", "stop"]
    assert table.rows[-1][-1] == "N=4 reaches the server's 4 slots"


def test_an_slo_lane_names_the_levels_its_p95_bound_leaves_out():
    def shortcuts(slo):
        return " ".join(i for b in _adaptive(slo) if isinstance(b, Bullets) for i in b.items)

    with_slo = shortcuts(SloConfig(p95_ttft_ms=500, p95_tpot_ms=50))
    assert "only the level the answer rests on" in with_slo and "59 requests" in with_slo
    assert "only the level the answer rests on" not in shortcuts(None)


def test_a_fixed_lane_has_no_section():
    assert plan_section(results(lane())) == []
