"""A recommendation that is the lower end of a range (not settled) is advertised at its lower end, with
the range and a note beside it, in the JSON report and the LiteLLM model_info."""

from __future__ import annotations

import json

import yaml

from satbench.capability.report import render_litellm
from tests.capability import test_model_architecture as arch


def test_an_unsettled_recommendation_carries_its_range(tmp_path, monkeypatch):
    recs = json.loads((arch.BUNDLE / "recommendations.json").read_text())
    v4 = next(r for r in recs["lanes"] if r["lane"] == "v4")
    v4["recommended_range"] = [v4["recommended_concurrency"], 8]
    edited = tmp_path / "bundle"
    edited.mkdir()
    (edited / "recommendations.json").write_text(json.dumps(recs))
    (edited / "run.json").write_text((arch.BUNDLE / "run.json").read_text())
    monkeypatch.setattr(arch, "BUNDLE", edited)
    rep = arch.report(tmp_path, "deepseek4")
    lane = arch.lanes(rep)["v4"]
    low = v4["recommended_concurrency"]
    assert lane.status == "measured" and lane.max_concurrency == low and lane.concurrency_range == (low, 8)
    assert any(f"between {low} and 8" in n for n in lane.notes)
    assert arch.lanes(rep)["dense"].concurrency_range is None
    info = {d["model_name"]: d["model_info"] for d in yaml.safe_load(render_litellm(rep))["model_list"]}
    assert info["v4"]["satbench_concurrency_range"] == [low, 8]
    assert "satbench_concurrency_range" not in info["dense"]
