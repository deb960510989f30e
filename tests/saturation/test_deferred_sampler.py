"""`requests_deferred` unknown (no /metrics) is said to be unknown, never "no deferred requests" (D3)."""

from __future__ import annotations

from satbench.saturation.bound import saturated_by
from satbench.saturation.recommend import confirmation
from tests.report.test_compare import lane


def test_unknown_deferral_is_null_and_said_to_be_unknown():
    levels = lane(levels=(1, 2, 4)).levels  # occupancy without /metrics figures: deferred unknown
    conf = confirmation(levels, 2, 4)
    assert conf.requests_deferred_max is None and conf.requests_deferred is None
    assert "deferred requests n/a" in conf.statement and "no deferred requests" not in conf.statement


def test_zero_and_positive_deferral_still_read_as_before():
    levels = lane(levels=(1, 2, 4)).levels
    levels[2].occupancy.requests_deferred_max = 0.0
    conf = confirmation(levels, 2, 4)
    assert conf.requests_deferred is False and "no deferred requests" in conf.statement
    levels[2].occupancy.requests_deferred_max = 3.0
    conf = confirmation(levels, 2, 4)
    assert conf.requests_deferred is True and "up to 3 request(s) deferred" in conf.statement


def test_saturation_statement_says_deferral_is_unknown():
    ln = lane(levels=(1, 2, 4))
    sat = saturated_by(ln, ln.levels[2])
    assert sat.requests_deferred_max is None
    assert "deferred requests n/a" in sat.statement
