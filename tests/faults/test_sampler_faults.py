"""/metrics and /slots failing or slow: the sweep goes on (exit 0; a slow scrape is given up at the
sampler's timeout and recorded as a TimeoutError), every failed scrape is recorded, and the figures
they feed are null with a reason, never zero."""

from __future__ import annotations

import pytest

from satbench.cli.main import main
from satbench.records.events import MetricsSample, SlotsSample, read_samples
from tests.faults.common import analyzable, kept_vs_completed, small_sweep, status_of, table_row

FED_BY_METRICS = ("decode_weighted_busy_slots", "requests_deferred_max")

CASES = {  # name → (fake knobs, what the failed scrapes say, output tokens: the level lasts ~65 ms each)
    "healthy": ({}, None, 16),  # the control: the same sweep has every figure
    "failing": ({"metrics_fail": True, "slots_fail": True}, "HTTP 500", 16),
    # slower than the sampler's 2 s timeout; the level lasts ~2.6 s so that scrapes time out inside it
    "slow": ({"metrics_delay_s": 3.0, "slots_delay_s": 3.0}, "TimeoutError", 40),
    "slots_only_failing": ({"slots_fail": True}, "HTTP 500", 16),
}


@pytest.mark.parametrize("case", list(CASES))
def test_metrics_and_slots_faults(case, fake_server, tmp_path, capsys):
    knobs, why, output = CASES[case]
    fake = fake_server(n_slots=2, decode_iteration_ms=10.0, **knobs)
    run_dir = tmp_path / "run"
    code = main(small_sweep(fake.base_url, run_dir, requests=10, output=output))
    err = capsys.readouterr().err
    assert code == 0 and "satbench: error" not in err and "Traceback" not in err
    assert status_of(run_dir) == "complete"
    kept, completed = kept_vs_completed(run_dir, fake.stop())
    assert kept == completed == 12
    level = analyzable(run_dir)["lanes"][0]["levels"][0]
    occ, missing = level["occupancy"], level["unavailable"]
    samples = read_samples(run_dir)
    metrics_bad = case in ("failing", "slow")
    slots_bad = case != "healthy"
    for kind, bad in ((MetricsSample, metrics_bad), (SlotsSample, slots_bad)):
        got = [s for s in samples if isinstance(s, kind)]
        assert got, kind  # failures are recorded too
        assert all((s.error is not None and why in s.error) if bad else s.error is None for s in got), kind
    for key in FED_BY_METRICS:
        if metrics_bad:
            assert occ[key] is None and key in missing, key
            assert "(/metrics failed: " in missing[key] and why in missing[key], missing[key]  # says why
        else:
            assert occ[key] is not None and key not in missing, key
    if metrics_bad:  # no /slots and no requests_processing gauge either
        assert occ["time_weighted_busy_slots"] is None and "time_weighted_busy_slots" in missing
    else:  # from /slots, or from /metrics' requests_processing when /slots fails
        assert occ["time_weighted_busy_slots"] is not None and "time_weighted_busy_slots" not in missing
        assert occ["time_weighted_source"] == ("requests_processing" if slots_bad else "slots")
    if case != "healthy":
        table_row(f"/metrics,/slots {case}", str(knobs), code, "(none)", "complete", kept, completed)
        print(f"  unavailable: {missing}")
