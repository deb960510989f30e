"""What every plot of a run shares: the kinds, sizes and style, titles, CI error bars, the
log2 concurrency axis and a fresh Agg figure (no pyplot, no global figure state)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from satbench.analysis.results import LaneResult
from satbench.metrics.level_result import LevelResult
from satbench.metrics.stats import Distribution, Estimate
from satbench.report.plot_file import PlotKind

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

DPI = 110
SIZE_IN: dict[PlotKind, tuple[float, float]] = {
    "throughput": (8.0, 4.5), "latency": (10.0, 4.2), "occupancy": (8.0, 4.5), "gpu": (10.0, 4.2),
    "timeline": (8.0, 4.5), "starvation": (8.0, 4.5), "goodput": (10.0, 4.2),
}
STYLE: dict[RcKeyType, Any] = {
    "font.size": 10, "axes.titlesize": 11, "axes.labelsize": 10, "legend.fontsize": 9,
    "xtick.labelsize": 9, "ytick.labelsize": 9, "axes.grid": True, "grid.alpha": 0.3,
    "grid.linewidth": 0.6, "hatch.linewidth": 0.6,
}
N_LABEL = "concurrency N (requests in flight)"
Drawn = tuple[Figure, str, str]  # figure, title, caption


def lane_title(lane: LaneResult, what: str) -> str:
    return f"{lane.lane}: {what}{' — SYNTHETIC weights' if lane.model.synthetic else ''}"


def ci_err(value: float, low: float | None, high: float | None) -> tuple[float, float]:
    """(below, above) error-bar lengths; 0 where a CI end is unknown (never negative)."""
    return (max(0.0, value - low) if low is not None else 0.0,
            max(0.0, high - value) if high is not None else 0.0)


def estimate_err(e: Estimate) -> tuple[float, float]:
    assert e.value is not None
    return ci_err(e.value, e.ci_low, e.ci_high)


def p95_err(d: Distribution) -> tuple[float, float]:
    assert d.p95 is not None
    ci = d.ci.get("p95")
    return ci_err(d.p95, ci.low, ci.high) if ci is not None else (0.0, 0.0)


def n_axis(ax: Axes, levels: Sequence[int]) -> None:
    """Log2 N axis ticked at the measured levels."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(levels), [str(n) for n in levels])
    ax.minorticks_off()
    lo, hi = min(levels), max(levels)
    ax.set_xlim(lo / 1.25, hi * 1.25)
    ax.set_xlabel(N_LABEL)


def new_figure(kind: PlotKind, ncols: int = 1) -> tuple[Figure, list[Axes]]:
    fig = Figure(figsize=SIZE_IN[kind], dpi=DPI, layout="constrained")
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, list(axes)


def by_concurrency(levels: Sequence[LevelResult]) -> list[LevelResult]:
    return sorted(levels, key=lambda lv: lv.concurrency)
