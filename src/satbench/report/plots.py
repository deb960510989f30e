"""PNG plots of a run, per lane: throughput, latency, occupancy here; GPU (plots_gpu.py), one
level's timeline and starvation (plots_requests.py).

Pure function of results.json, recommendations.json and the raw request events; each plot is
written only when its data exists, and comes back as a `PlotFile` with a caption saying how to
read it. Figures are drawn with the Agg canvas directly (no pyplot, no global figure state) and
saved without the matplotlib version, so the same inputs give the same files.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from pathlib import Path

import matplotlib
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from satbench.analysis.results import LaneResult, ResultsFile
from satbench.metrics.level_result import LevelResult
from satbench.records.events import RequestEvent
from satbench.records.layout import PLOTS_DIR
from satbench.records.manifest import write_text_atomic
from satbench.records.rundir import make_run_subdir
from satbench.report.plot_file import KINDS, PlotFile, PlotKind
from satbench.report.plot_style import (
    DPI,
    STYLE,
    Drawn,
    by_concurrency,
    estimate_err,
    lane_title,
    n_axis,
    new_figure,
    p95_err,
)
from satbench.report.plots_gpu import gpu_plot
from satbench.report.plots_rates import goodput_plot
from satbench.report.plots_requests import starvation_plot, timeline_plot
from satbench.saturation.recommendations_file import LaneRecommendation, RecommendationsFile

# ---------------------------------------------------------------- helpers


def marker_lines(rec: LaneRecommendation | None) -> list[tuple[str, int, str]]:
    """(what, N, legend label) of the vertical lines on the throughput plot: the knee and the
    recommended concurrency with its binding reason; none without a recommendation."""
    if rec is None:
        return []
    out = [("knee", rec.knee, f"knee N={rec.knee}")] if rec.knee is not None else []
    if rec.recommended_concurrency is not None:
        out.append(("recommended", rec.recommended_concurrency,
                    f"recommended N={rec.recommended_concurrency} (bound by {rec.binding.reason})"))
    return out


def _save(fig: Figure, run_dir: Path, lane: str, kind: PlotKind) -> str:
    rel = f"{PLOTS_DIR}/{lane}-{kind}.png"
    make_run_subdir(run_dir / PLOTS_DIR)  # a real directory of the run, never a link out of it
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    write_text_atomic(run_dir / rel, buf.getvalue(), run_dir=run_dir)  # never a half-written PNG
    fig.clear()
    return rel


# ---------------------------------------------------------------- throughput


def _throughput_series(ax: Axes, levels: Sequence[LevelResult], label: str, fmt: str) -> list[int]:
    pts = [(lv, rate) for lv in by_concurrency(levels)
           if (rate := lv.throughput.output_tok_per_s.value) is not None]
    if not pts:
        return []
    errs = [estimate_err(lv.throughput.output_tok_per_s) for lv, _ in pts]
    ax.errorbar([lv.concurrency for lv, _ in pts], [rate for _, rate in pts],
                yerr=[[e[0] for e in errs], [e[1] for e in errs]], fmt=fmt, capsize=3, label=label)
    return [lv.concurrency for lv, _ in pts]


def _throughput(lane: LaneResult, rec: LaneRecommendation | None) -> Drawn | None:
    fig, (ax,) = new_figure("throughput")
    ns = _throughput_series(ax, lane.levels, "alone", "o-")
    if not ns:
        return None
    ns += _throughput_series(ax, lane.together_levels, "together with other lanes", "s--")
    lines = marker_lines(rec)
    for what, n, label in lines:  # the knee dotted on top, so it shows where both coincide
        if what == "recommended":
            ax.axvline(n, color="tab:green", linewidth=4, alpha=0.45, zorder=1.5, label=label)
        else:
            ax.axvline(n, color="black", linestyle=":", linewidth=1.5, zorder=3, label=label)
    n_axis(ax, sorted(set(ns) | {n for _, n, _ in lines}))
    ax.set_ylabel("output throughput (tokens/s)")
    ax.set_ylim(bottom=0)
    ax.legend(loc="best")
    title = lane_title(lane, "output throughput vs concurrency")
    ax.set_title(title)
    cap = ("Mean output tokens/s over repetitions at each concurrency, bars = 95 % CI (t over repetitions; "
           "none with one repetition).")
    if lane.together_levels:
        cap += " Dashed: the same lane while every lane of the run ran at once."
    if lines:
        cap += " Vertical lines: " + ", ".join(label for _, _, label in lines) + "."
    return fig, title, cap


# ---------------------------------------------------------------- latency


def _dist_series(ax: Axes, levels: Sequence[LevelResult], pick: str, label: str, fmt: str,
                 p95_ci: bool) -> bool:
    pts = [(lv.concurrency, getattr(lv.latency, pick)) for lv in levels]
    key = "p95" if p95_ci else "p50"
    pts = [(n, d) for n, d in pts if getattr(d, key) is not None]
    if not pts:
        return False
    xs, ys = [n for n, _ in pts], [getattr(d, key) for _, d in pts]
    if p95_ci:
        errs = [p95_err(d) for _, d in pts]
        ax.errorbar(xs, ys, yerr=[[e[0] for e in errs], [e[1] for e in errs]], fmt=fmt, capsize=3,
                    label=label)
    else:
        ax.plot(xs, ys, fmt, label=label)
    return True


def _latency(lane: LaneResult) -> Drawn | None:
    levels = by_concurrency(lane.levels)
    fig, (left, right) = new_figure("latency", 2)
    drawn = _dist_series(left, levels, "ttft_ms", "TTFT p50", "o-", False)
    drawn |= _dist_series(left, levels, "ttft_ms", "TTFT p95", "^-", True)
    drawn |= _dist_series(right, levels, "itl_ms", "ITL p50", "o-", False)
    drawn |= _dist_series(right, levels, "itl_ms", "ITL p95", "^-", True)
    drawn |= _dist_series(right, levels, "tpot_ms", "TPOT p95", "s--", True)
    if not drawn:
        return None
    if lane.slo is not None:
        left.axhline(lane.slo.p95_ttft_ms, color="tab:red", linestyle=":", label="SLO p95 TTFT")
        right.axhline(lane.slo.p95_tpot_ms, color="tab:red", linestyle=":", label="SLO p95 TPOT")
    for ax, what in ((left, "time to first token (ms)"), (right, "time per output token (ms)")):
        n_axis(ax, [lv.concurrency for lv in levels])
        ax.set_ylabel(what)
        ax.set_ylim(bottom=0)
        handles, labels = ax.get_legend_handles_labels()
        order = sorted(range(len(labels)), key=lambda i: labels[i].startswith("SLO"))  # data first
        ax.legend([handles[i] for i in order], [labels[i] for i in order], loc="upper center",
                  bbox_to_anchor=(0.5, -0.17), ncols=3 if len(labels) <= 3 else 2, frameon=False)
    left.set_title("TTFT")
    right.set_title("inter-token latency and TPOT")
    title = lane_title(lane, "latency vs concurrency")
    fig.suptitle(title, fontsize=11)
    cap = ("Left: time to first token; right: inter-token latency (pooled gaps) and per-request TPOT, "
           "over requests completing in the steady window. Bars on p95 = 95 % order-statistic CI "
           "(an end that too few samples cannot bound is left off).")
    if lane.slo is not None:
        cap += " Red dotted: the lane's SLO targets (p95 TTFT left, p95 TPOT right; compare with TPOT p95)."
    return fig, title, cap


# ---------------------------------------------------------------- occupancy

OCCUPANCY = (("time_weighted_busy_slots", "busy slots, time-weighted", "o-"),
             ("decode_weighted_busy_slots", "busy slots per decode", "^-"),
             ("client_in_flight", "client requests in flight", "s--"))


def _occupancy(lane: LaneResult) -> Drawn | None:
    levels = by_concurrency(lane.levels)
    fig, (ax,) = new_figure("occupancy")
    drawn = False
    for field, label, fmt in OCCUPANCY:
        pts = [(lv.concurrency, v) for lv in levels  # log scale: a zero cannot be drawn, so it is left out
               if (v := getattr(lv.occupancy, field)) is not None and v > 0]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], fmt, label=label)
            drawn = True
    if not drawn:
        return None
    ns = [lv.concurrency for lv in levels]
    ax.plot(ns, ns, color="tab:grey", linewidth=5, alpha=0.3, zorder=1, label="offered (y = N)")
    slots = next((lv.occupancy.slots for lv in levels if lv.occupancy.slots), None)
    if slots:
        ax.axhline(slots, color="tab:red", linestyle="-.", linewidth=1, label=f"server slots ({slots})")
    n_axis(ax, ns)
    ax.set_yscale("log", base=2)
    ticks = sorted(set(ns) | ({slots} if slots else set()))
    ax.set_yticks(ticks, [str(t) for t in ticks])
    ax.set_ylim(min(ns) / 1.5, max(ticks) * 1.5)
    ax.set_ylabel("busy slots / requests")
    ax.legend(loc="upper left")
    title = lane_title(lane, "occupancy vs concurrency")
    ax.set_title(title)
    cap = ("Mean occupancy over the steady window at each concurrency (log scales): busy slots from /slots "
           "or requests_processing, busy slots per decode step from /metrics, and the client's own count of "
           "requests in flight. Points on the wide grey line mean every offered request was being served; "
           "a flat line below it means requests waited. A level with none busy has no point (log scale).")
    return fig, title, cap


# ---------------------------------------------------------------- entry point


def _lane_plots(lane: LaneResult, rec: LaneRecommendation | None,
                events: Sequence[RequestEvent]) -> Iterator[tuple[PlotKind, Drawn]]:
    makers = {"throughput": lambda: _throughput(lane, rec), "latency": lambda: _latency(lane),
              "occupancy": lambda: _occupancy(lane), "gpu": lambda: gpu_plot(lane, rec),
              "timeline": lambda: timeline_plot(lane, events),
              "starvation": lambda: starvation_plot(lane, events), "goodput": lambda: goodput_plot(lane, rec)}
    for kind in KINDS:
        if (drawn := makers[kind]()) is not None:
            yield kind, drawn


def write_plots(run_dir: Path, results: ResultsFile, recs: RecommendationsFile | None,
                events: Sequence[RequestEvent]) -> list[PlotFile]:
    """Writes PNGs under run_dir/'plots' and returns them in a stable order (lane order, then kind order)."""
    by_lane = {r.lane: r for r in recs.lanes} if recs else {}
    requests = [e for e in events if isinstance(e, RequestEvent)]
    out: list[PlotFile] = []
    with matplotlib.rc_context(STYLE):
        for lane in results.lanes:
            for kind, (fig, title, caption) in _lane_plots(lane, by_lane.get(lane.lane), requests):
                rel = _save(fig, run_dir, lane.lane, kind)
                out.append(PlotFile(file=rel, lane=lane.lane, kind=kind, title=title, caption=caption))
    return out
