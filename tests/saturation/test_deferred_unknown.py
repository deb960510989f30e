"""`requests_deferred` unknown (no /metrics) is said to be unknown, never "no deferred requests" (D3)."""

from __future__ import annotations

from satbench.saturation.bound import saturated_by
from satbench.saturation.recommend import confirmation
from tests.builders import replaced
from tests.report.test_compare import lane


def test_unknown_deferral_is_null_and_said_to_be_unknown():
    levels = lane(levels=(1, 2, 4)).levels  # occupancy without /metrics figures: deferred unknown
    conf = confirmation(levels, 2, 4)
    assert conf.requests_deferred_max is None and conf.requests_deferred is None
    assert "deferred requests n/a" in conf.statement and "no deferred requests" not in conf.statement


def test_zero_and_positive_deferral_still_read_as_before():
    levels = lane(levels=(1, 2, 4)).levels
    levels = replaced(levels, {"2.occupancy.requests_deferred_max": 0.0})
    conf = confirmation(levels, 2, 4)
    assert conf.requests_deferred is False and "no deferred requests" in conf.statement
    levels = replaced(levels, {"2.occupancy.requests_deferred_max": 3.0})
    conf = confirmation(levels, 2, 4)
    assert conf.requests_deferred is True and "up to 3 request(s) deferred" in conf.statement


def test_saturation_statement_says_deferral_is_unknown():
    ln = lane(levels=(1, 2, 4))
    sat = saturated_by(ln, ln.levels[2])
    assert sat.requests_deferred_max is None
    assert "deferred requests n/a" in sat.statement


def test_without_metrics_the_confirmation_reads_the_time_weighted_busy_slots_as_the_binding_does():
    """No /metrics: the decode-weighted figure is missing, so 'busy slots n/a' beside a binding that
    read '3.8 of 4 slots busy (time-weighted)' from /slots; both now read the same figure, named."""
    levels = lane(levels=(1, 2, 4)).levels
    levels = [replaced(lv, {"occupancy.decode_weighted_busy_slots": None}) for lv in levels]
    levels = replaced(levels, {"2.occupancy.time_weighted_busy_slots": 3.8})
    conf = confirmation(levels, 2, 4)
    assert conf.busy_slots == 3.8 and conf.busy_slots_variant == "time-weighted"
    assert conf.busy_slots_per_decode is None
    assert "3.8 of 4 slots busy time-weighted" in conf.statement and conf.slots_saturated
    levels = replaced(levels, {"2.occupancy.decode_weighted_busy_slots": 2.0})
    conf = confirmation(levels, 2, 4)
    assert conf.busy_slots == 2.0 and conf.busy_slots_variant == "per decode" and not conf.slots_saturated
