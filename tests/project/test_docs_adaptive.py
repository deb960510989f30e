"""docs/adaptive.md states the adaptive sweep's and the contention guard's figures: each bold figure
on it is the constant or default of the code it names, in the order the page gives them."""

from __future__ import annotations

import re
from pathlib import Path

from satbench.config.schema import AdaptiveConfig
from satbench.metrics import contention, level_flags, throughput
from satbench.saturation import planner
from satbench.saturation.slo import fewest_to_bound_p95

DOC = Path(__file__).resolve().parents[2] / "docs" / "adaptive.md"


def test_every_bold_figure_is_the_codes():
    a = AdaptiveConfig()
    expected = [a.min_repetitions, a.contended_retries, a.ci_target * 100, a.max_repetitions,
                planner.CONFIRM_REQUESTS_PER_STREAM, throughput.BATCHES,
                throughput.ONE_REPETITION_CI_FLOOR * 100, fewest_to_bound_p95(), planner.SLO_MAX_REPETITIONS,
                planner.GROWTH_EXPONENT,
                a.requests_per_stream,
                level_flags.NEIGHBOUR_CORES, level_flags.CONTENDED_FRACTION * 100,
                contention.SATURATED_OTHERS_CORES,
                contention.MIN_CLEAN_REPETITIONS]
    text = DOC.read_text(encoding="utf-8")
    shown = [float(m.group(1)) for m in re.finditer(r"\*\*([\d.]+)(?: %)?\*\*", text)]
    assert shown == [float(v) for v in expected]
