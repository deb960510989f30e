"""The GPU plot: what the GPU and the server's CPU did at each concurrency, beside throughput.

Drawn only when NVML saw a GPU. Left: GPU utilisation (mean, with the max as the bar's top)
against the thresholds that classify saturation (saturation/bound.py); right: output
throughput and the server's CPU cores, so "throughput flat while the GPU idles" is one glance.
"""

from __future__ import annotations

from satbench.analysis.results import LaneResult
from satbench.report.plot_style import Drawn, by_concurrency, lane_title, n_axis, new_figure
from satbench.saturation.bound import GPU_BUSY_PCT, GPU_IDLE_PCT
from satbench.saturation.recommendations_file import LaneRecommendation


def gpu_plot(lane: LaneResult, rec: LaneRecommendation | None) -> Drawn | None:
    used = [(lv.concurrency, gpu, mean) for lv in by_concurrency(lane.levels)
            if (gpu := lv.gpu) is not None and (mean := gpu.util_mean_pct) is not None]
    if not used:
        return None
    fig, (left, right) = new_figure("gpu", 2)
    ns = [n for n, _, _ in used]
    util = [u for _, _, u in used]
    top = [max(0.0, (g.util_max_pct or u) - u) for _, g, u in used]
    left.errorbar(ns, util, yerr=[[0.0] * len(ns), top], fmt="o-", capsize=3,
                  label="GPU utilisation (mean; bar: max)")
    left.axhline(GPU_BUSY_PCT, color="tab:red", linestyle="--", linewidth=1,
                 label=f"GPU-bound ≥ {GPU_BUSY_PCT:.0f} %")
    left.axhline(GPU_IDLE_PCT, color="tab:green", linestyle=":", linewidth=1,
                 label=f"≤ {GPU_IDLE_PCT:.0f} % while flat: server_cpu-bound")
    clocks = [(n, mhz) for n, g, _ in used if (mhz := g.sm_clock_mean_mhz)]
    n_axis(left, ns)
    left.set_ylim(0, 105)
    left.set_ylabel("GPU utilisation (%)")
    left.legend(loc="lower right")
    _twin_series(left, clocks, "s:", "tab:grey", "SM clock (MHz)", headroom=1.15, legend_loc="upper left")
    pts = [(lv.concurrency, lv.throughput.output_tok_per_s.value) for lv in by_concurrency(lane.levels)
           if lv.throughput.output_tok_per_s.value is not None]
    right.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label="output tok/s")
    n_axis(right, [p[0] for p in pts] or ns)
    right.set_ylabel("output tokens per second (tok/s)")
    right.set_ylim(0, max((p[1] for p in pts), default=1.0) * 1.15)
    cpu = [(lv.concurrency, lv.memory.server_cpu_cores) for lv in by_concurrency(lane.levels)
           if lv.memory.server_cpu_cores is not None]
    _twin_series(right, cpu, "^--", "tab:purple", "server CPU (cores)", headroom=1.3,
                 legend_loc="lower right")
    right.legend(loc="upper left")
    if rec is not None and rec.knee is not None:
        for ax in (left, right):
            ax.axvline(rec.knee, color="tab:orange", linestyle="--", linewidth=1)
    title = lane_title(lane, "GPU and server CPU vs concurrency")
    fig.suptitle(title)
    what = f" What saturated past the knee: {rec.saturation.resource}." if rec and rec.saturation else ""
    cap = ("NVML utilisation of the busiest GPU (share of time a kernel ran; device-wide) and its SM clock, "
           "beside output throughput and the server's CPU cores, each averaged over the steady windows; the "
           f"orange line is the knee.{what}")
    return fig, title, cap


def _twin_series(ax, pts: list[tuple[int, float]], fmt: str, color: str, label: str, headroom: float,
                 legend_loc: str) -> None:
    """A second series on the axes' right-hand scale (from 0 to its maximum × headroom); none when empty."""
    if not pts:
        return
    twin = ax.twinx()
    twin.plot([p[0] for p in pts], [p[1] for p in pts], fmt, color=color, label=label)
    twin.set_ylabel(label)
    twin.set_ylim(0, max(p[1] for p in pts) * headroom)
    twin.legend(loc=legend_loc)
