"""Hardware classes (--per-class): one node per hardware fingerprint is measured in full, the others
of its class run a short check that `compare` holds against the class reference.

The short check runs, for every lane, the reference's recommended concurrency alone (the lane's
lowest level when the reference found none) at fixed levels, `spot_check.repetitions` times. A node
is *slower* when any lane's output tok/s there is, by `satbench compare`, significantly lower than
the reference's by at least `spot_check.min_effect` (the CI of B ÷ A below 1 and the ratio at most
1 − min_effect); such a node is measured in full and flagged, because the same fingerprint does
not mean the same speed. A check that cannot be compared (another model, workload or runtime) is
slower too: only a full run speaks for that node then.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import Field

from satbench.config.schema import RunConfig, Strict
from satbench.errors import SatbenchError
from satbench.fleet.inventory import SpotCheck


class SpotVerdict(Strict):
    reference: str
    slower: bool
    lanes: dict[str, str] = Field(default_factory=dict, description="lane → its ratio at the checked level")
    reason: str | None = None


def spot_config(cfg: RunConfig, reference_recommendations: bytes, spot: SpotCheck) -> RunConfig:
    """The short check of every lane: the reference's recommended level alone, fixed, no fairness."""
    recs = json.loads(reference_recommendations)
    chosen = {r["lane"]: r.get("recommended_concurrency") for r in recs.get("lanes", [])}
    lanes = [lane.model_copy(update={
        "levels": [chosen.get(lane.name) or min(lane.levels)], "adaptive": None,
        "repetitions": spot.repetitions,
        "requests_per_level": spot.requests_per_level or lane.requests_per_level}) for lane in cfg.lanes]
    return cfg.model_copy(update={"lanes": lanes, "with_fairness": False, "refine": False, "together": False})


def spot_verdict(reference_run: Path, spot_run: Path, reference: str, spot: SpotCheck) -> SpotVerdict:
    """The check held against the reference's run by `compare` (report.compare.compare_runs)."""
    from satbench.report.compare import compare_runs

    try:
        cmp = compare_runs(reference_run, spot_run, min_effect=spot.min_effect)
    except SatbenchError as exc:
        return SpotVerdict(reference=reference, slower=True, reason=f"not comparable with {reference}: {exc}")
    lanes: dict[str, str] = {}
    slow: list[str] = []
    for lane in cmp.lanes:
        if not lane.levels:
            slow.append(f"lane {lane.lane}: no level in common with {reference}")
            continue
        for level in lane.levels:
            m = next(x for x in level.metrics if x.metric == "output_tok_per_s")
            r = m.ratio
            text = (f"N={level.concurrency} {r.value:.3f}× [{_end(r.ci_low)}, {_end(r.ci_high)}]"
                    if r.value is not None else f"N={level.concurrency} no ratio")
            lanes[lane.lane] = text
            if m.direction == "worse":
                slow.append(f"lane {lane.lane} output tok/s {text} of {reference}'s")
    return SpotVerdict(reference=reference, slower=bool(slow), lanes=lanes,
                       reason=("significantly slower than its class reference: " + "; ".join(slow)) if slow
                       else None)


def _end(x: float | None) -> str:
    return "open" if x is None else f"{x:.3f}"
