"""PNG plots of a run, per lane: throughput, latency, occupancy, one level's timeline, starvation.

Pure function of results.json, recommendations.json and the raw request events; each plot is
written only when its data exists, and comes back as a `PlotFile` with a caption saying how to
read it. Figures are drawn with the Agg canvas directly (no pyplot, no global figure state) and
saved without the matplotlib version, so the same inputs give the same files.
"""

from __future__ import annotations

import io
import statistics
from pathlib import Path
from typing import Iterator, Literal, Sequence

import matplotlib
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from satbench.config import Strict
from satbench.events import RequestEvent
from satbench.manifest import write_text_atomic
from satbench.metrics.latency import first_token_ns
from satbench.metrics.level import LevelResult
from satbench.metrics.stats import Distribution, Estimate
from satbench.results import LaneResult, ResultsFile
from satbench.saturation.recommend import LaneRecommendation, RecommendationsFile

PlotKind = Literal["throughput", "latency", "occupancy", "gpu", "timeline", "starvation"]
KINDS: tuple[PlotKind, ...] = ("throughput", "latency", "occupancy", "gpu", "timeline", "starvation")
PLOTS_DIR = "plots"
DPI = 110
SIZE_IN: dict[PlotKind, tuple[float, float]] = {
    "throughput": (8.0, 4.5), "latency": (10.0, 4.2), "occupancy": (8.0, 4.5), "gpu": (10.0, 4.2),
    "timeline": (8.0, 4.5), "starvation": (8.0, 4.5),
}
MAX_BARS = 200
MARKERS = ("o", "s", "^", "v", "D", "x", "+")
STALL_FACTOR = 3.0
NS_PER_S = 1e9
NS_PER_MS = 1e6
STYLE = {"font.size": 10, "axes.titlesize": 11, "axes.labelsize": 10, "legend.fontsize": 9,
         "xtick.labelsize": 9, "ytick.labelsize": 9, "axes.grid": True, "grid.alpha": 0.3,
         "grid.linewidth": 0.6, "hatch.linewidth": 0.6}
N_LABEL = "concurrency N (requests in flight)"
Drawn = tuple[Figure, str, str]  # figure, title, caption


class PlotFile(Strict):
    file: str
    lane: str | None
    kind: PlotKind
    title: str
    caption: str


# ---------------------------------------------------------------- helpers


def marker_lines(rec: LaneRecommendation | None) -> list[tuple[str, int, str]]:
    """(what, N, legend label) of the vertical lines on the throughput plot: the knee and the
    recommended concurrency with its binding reason; none without a recommendation."""
    if rec is None:
        return []
    out = [("knee", rec.knee, f"knee N={rec.knee}")] if rec.knee is not None else []
    out.append(("recommended", rec.recommended_concurrency,
                f"recommended N={rec.recommended_concurrency} (bound by {rec.binding.reason})"))
    return out


def _title(lane: LaneResult, what: str) -> str:
    return f"{lane.lane}: {what}{' — SYNTHETIC weights' if lane.model.synthetic else ''}"


def _err(value: float, low: float | None, high: float | None) -> tuple[float, float]:
    """(below, above) error-bar lengths; 0 where a CI end is unknown (never negative)."""
    return (max(0.0, value - low) if low is not None else 0.0,
            max(0.0, high - value) if high is not None else 0.0)


def _est_err(e: Estimate) -> tuple[float, float]:
    assert e.value is not None
    return _err(e.value, e.ci_low, e.ci_high)


def _p95_err(d: Distribution) -> tuple[float, float]:
    assert d.p95 is not None
    ci = d.ci.get("p95")
    return _err(d.p95, ci.low, ci.high) if ci is not None else (0.0, 0.0)


def _n_axis(ax: Axes, levels: Sequence[int]) -> None:
    """Log2 N axis ticked at the measured levels."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(levels), [str(n) for n in levels])
    ax.minorticks_off()
    lo, hi = min(levels), max(levels)
    ax.set_xlim(lo / 1.25, hi * 1.25)
    ax.set_xlabel(N_LABEL)


def _save(fig: Figure, run_dir: Path, lane: str, kind: PlotKind) -> str:
    rel = f"{PLOTS_DIR}/{lane}-{kind}.png"
    (run_dir / PLOTS_DIR).mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    write_text_atomic(run_dir / rel, buf.getvalue())  # never a half-written PNG
    fig.clear()
    return rel


def _figure(kind: PlotKind, ncols: int = 1) -> tuple[Figure, list[Axes]]:
    fig = Figure(figsize=SIZE_IN[kind], dpi=DPI, layout="constrained")
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, list(axes)


def _sorted(levels: Sequence[LevelResult]) -> list[LevelResult]:
    return sorted(levels, key=lambda lv: lv.concurrency)


# ---------------------------------------------------------------- throughput


def _throughput_series(ax: Axes, levels: Sequence[LevelResult], label: str, fmt: str) -> list[int]:
    pts = [lv for lv in _sorted(levels) if lv.throughput.output_tok_per_s.value is not None]
    if not pts:
        return []
    errs = [_est_err(lv.throughput.output_tok_per_s) for lv in pts]
    ax.errorbar([lv.concurrency for lv in pts], [lv.throughput.output_tok_per_s.value for lv in pts],
                yerr=[[e[0] for e in errs], [e[1] for e in errs]], fmt=fmt, capsize=3, label=label)
    return [lv.concurrency for lv in pts]


def _throughput(lane: LaneResult, rec: LaneRecommendation | None) -> Drawn | None:
    fig, (ax,) = _figure("throughput")
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
    _n_axis(ax, sorted(set(ns) | {n for _, n, _ in lines}))
    ax.set_ylabel("output throughput (tokens/s)")
    ax.set_ylim(bottom=0)
    ax.legend(loc="best")
    title = _title(lane, "output throughput vs concurrency")
    ax.set_title(title)
    cap = ("Mean output tokens/s over repetitions at each concurrency, bars = 95 % CI (t over repetitions; "
           "none with one repetition).")
    if lane.together_levels:
        cap += " Dashed: the same lane while every lane of the run ran at once."
    if lines:
        cap += " Vertical lines: " + ", ".join(label for _, _, label in lines) + "."
    return fig, title, cap


# ---------------------------------------------------------------- latency


def _dist_series(ax: Axes, levels: Sequence[LevelResult], pick: str, label: str, fmt: str, p95_ci: bool) -> bool:
    pts = [(lv.concurrency, getattr(lv.latency, pick)) for lv in levels]
    key = "p95" if p95_ci else "p50"
    pts = [(n, d) for n, d in pts if getattr(d, key) is not None]
    if not pts:
        return False
    xs, ys = [n for n, _ in pts], [getattr(d, key) for _, d in pts]
    if p95_ci:
        errs = [_p95_err(d) for _, d in pts]
        ax.errorbar(xs, ys, yerr=[[e[0] for e in errs], [e[1] for e in errs]], fmt=fmt, capsize=3, label=label)
    else:
        ax.plot(xs, ys, fmt, label=label)
    return True


def _latency(lane: LaneResult) -> Drawn | None:
    levels = _sorted(lane.levels)
    fig, (left, right) = _figure("latency", 2)
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
        _n_axis(ax, [lv.concurrency for lv in levels])
        ax.set_ylabel(what)
        ax.set_ylim(bottom=0)
        handles, labels = ax.get_legend_handles_labels()
        order = sorted(range(len(labels)), key=lambda i: labels[i].startswith("SLO"))  # data first
        ax.legend([handles[i] for i in order], [labels[i] for i in order], loc="upper center",
                  bbox_to_anchor=(0.5, -0.17), ncols=3 if len(labels) <= 3 else 2, frameon=False)
    left.set_title("TTFT")
    right.set_title("inter-token latency and TPOT")
    title = _title(lane, "latency vs concurrency")
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
    levels = _sorted(lane.levels)
    fig, (ax,) = _figure("occupancy")
    drawn = False
    for field, label, fmt in OCCUPANCY:
        pts = [(lv.concurrency, v) for lv in levels if (v := getattr(lv.occupancy, field)) is not None]
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
    _n_axis(ax, ns)
    ax.set_yscale("log", base=2)
    ticks = sorted(set(ns) | ({slots} if slots else set()))
    ax.set_yticks(ticks, [str(t) for t in ticks])
    ax.set_ylim(min(ns) / 1.5, max(ticks) * 1.5)
    ax.set_ylabel("busy slots / requests")
    ax.legend(loc="upper left")
    title = _title(lane, "occupancy vs concurrency")
    ax.set_title(title)
    cap = ("Mean occupancy over the steady window at each concurrency (log scales): busy slots from /slots or "
           "requests_processing, busy slots per decode step from /metrics, and the client's own count of "
           "requests in flight. Points on the wide grey line mean every offered request was being served; "
           "a flat line below it means requests waited.")
    return fig, title, cap


# ---------------------------------------------------------------- timeline


def _timeline_events(lane: LaneResult, events: Sequence[RequestEvent]) -> tuple[int, int, list[RequestEvent]]:
    """(level, repetition, measured requests by sent time) of the lane's highest solo level."""
    if not lane.levels:
        return 0, 0, []
    n = max(lv.concurrency for lv in lane.levels)
    mine = [e for e in events if e.lane == lane.lane and e.scenario == "solo" and e.level == n
            and e.phase == "measured"]
    if not mine:
        return n, 0, []
    rep = min(e.repetition for e in mine)
    return n, rep, sorted((e for e in mine if e.repetition == rep), key=lambda e: (e.sent_ns, e.seq))


def _token_gaps(e: RequestEvent) -> Iterator[tuple[int, int, float]]:
    """(start ns, end ns, ms per token) between consecutive token-carrying chunks."""
    ts = [(t, n) for t, n in e.chunks if n > 0]
    for a, b in zip(ts, ts[1:]):
        yield a[0], b[0], (b[0] - a[0]) / NS_PER_MS / b[1]


def _segments(e: RequestEvent) -> dict[str, tuple[int, int]]:
    """Named (start ns, end ns) parts of one request's bar."""
    if not e.ok:
        return {"failed": (e.sent_ns, e.end_ns)}
    first = first_token_ns(e)
    if first is None:
        return {"waiting": (e.sent_ns, e.end_ns)}
    out: dict[str, tuple[int, int]] = {}
    prompt_ms = e.timings.prompt_ms if e.timings else None
    if prompt_ms is None:
        out["waiting"] = (e.sent_ns, first)
    else:
        start = max(e.sent_ns, first - int(prompt_ms * NS_PER_MS))
        out["queued"], out["prefill"] = (e.sent_ns, start), (start, first)
    out["decode"] = (first, e.end_ns)
    return out


SEGMENT_STYLE = {
    "queued": dict(facecolor="tab:orange", label="queued (estimate)"),
    "prefill": dict(facecolor="tab:purple", label="prefill (server prompt_ms)"),
    "waiting": dict(facecolor="tab:olive", label="sent → first token (no server timings)"),
    "decode": dict(facecolor="tab:blue", label="decode"),
    "stall": dict(facecolor="tab:red", label=f"stall (token gap > {STALL_FACTOR:g}× median)"),
    "failed": dict(facecolor="lightgrey", edgecolor="dimgrey", hatch="///", label="failed request"),
}


def _timeline(lane: LaneResult, events: Sequence[RequestEvent]) -> Drawn | None:
    n, rep, reqs = _timeline_events(lane, events)
    if not reqs:
        return None
    total, reqs = len(reqs), reqs[:MAX_BARS]
    t0 = reqs[0].sent_ns
    gaps = [g for e in reqs if e.ok for g in _token_gaps(e)]
    median = statistics.median(g[2] for g in gaps) if gaps else None
    bars: dict[str, list[tuple[int, list[tuple[float, float]]]]] = {k: [] for k in SEGMENT_STYLE}
    for row, e in enumerate(reqs):
        for name, (a, b) in _segments(e).items():
            bars[name].append((row, [((a - t0) / NS_PER_S, max(b - a, 0) / NS_PER_S)]))
        if median is not None and e.ok:
            stalls = [((a - t0) / NS_PER_S, (b - a) / NS_PER_S)
                      for a, b, ms in _token_gaps(e) if ms > STALL_FACTOR * median]
            if stalls:
                bars["stall"].append((row, stalls))
    fig, (ax,) = _figure("timeline")
    for name, rows in bars.items():
        style = dict(SEGMENT_STYLE[name])
        label = style.pop("label")
        for i, (row, spans) in enumerate(rows):
            ax.broken_barh(spans, (row - 0.4, 0.8), label=label if i == 0 else None, linewidth=0, **style)
    ax.set_ylim(len(reqs) - 0.5, -0.5)
    ax.set_xlim(left=0)
    ax.set_xlabel("time since the first request was sent (s)")
    ax.set_ylabel("request (in order sent)")
    ax.grid(axis="y", visible=False)
    fig.legend(loc="outside lower center", ncols=min(4, sum(1 for rows in bars.values() if rows)), frameon=False)
    title = _title(lane, f"requests at N={n}, repetition {rep}")
    ax.set_title(title)
    shown = f"the first {len(reqs)} of {total} measured requests" if total > len(reqs) else \
        f"all {total} measured requests"
    cap = (f"One bar per request of the highest solo level (N={n}, repetition {rep}; warmup not shown), "
           f"{shown}, top to bottom in the order sent. Queued = sent → first token minus the server's "
           f"prompt_ms (an estimate); decode = first token → last byte.")
    if median is not None:
        cap += (f" Red: gaps between tokens over {STALL_FACTOR:g}× the median "
                f"({median:.1f} ms per token).")
    if any(not e.ok for e in reqs):
        cap += " Grey hatched: failed requests."
    return fig, title, cap


# ---------------------------------------------------------------- starvation


def _starvation(lane: LaneResult, events: Sequence[RequestEvent]) -> Drawn | None:
    s1 = [e for e in events if e.lane == lane.lane and e.scenario == "fairness" and e.check == "S1"
          and e.phase != "warmup"]
    dec = sorted((e for e in s1 if e.role == "decoder"), key=lambda e: (e.sent_ns, e.stream))
    if not dec:
        return None
    t0 = dec[0].sent_ns
    fig, (ax,) = _figure("starvation")
    drawn = False
    for i, e in enumerate(dec):
        pts = [((b - t0) / NS_PER_S, ms) for _, b, ms in _token_gaps(e) if ms > 0]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], MARKERS[i % len(MARKERS)], markersize=4,
                    alpha=0.7, fillstyle="none" if i % 2 else "full", label=f"decoder {i + 1}")
            drawn = True
    if not drawn:
        return None
    inj = next((e for e in s1 if e.role == "injected"), None)
    inj_end = first_token_ns(inj) if inj else None
    if inj is not None:
        end = inj_end if inj_end is not None else inj.end_ns
        ax.axvspan((inj.sent_ns - t0) / NS_PER_S, (end - t0) / NS_PER_S, color="tab:orange", alpha=0.2,
                   label=f"injected prefill ({inj.prompt_tokens}-token prompt)")
    verdict = next((v for v in lane.fairness if v.check == "S1"), None)
    bound = verdict.bounds.get("max_itl_ms") if verdict else None
    if bound:
        ax.axhline(bound, color="tab:red", linestyle=":", label=f"S1 bound on max ITL ({bound:.0f} ms)")
    ax.set_yscale("log")
    ax.set_xlim(left=0)
    ax.set_xlabel("time since the first decoder was sent (s)")
    ax.set_ylabel("inter-token latency (ms per token)")
    ax.legend(loc="best")
    title = _title(lane, "S1 decoders during a long prefill")
    ax.set_title(title)
    cap = (f"Each point is one gap between tokens of a decoder ({len(dec)} decoders), plotted at the later "
           f"token's arrival; log scale. Shaded: the injected long prompt from sent to its first token. "
           f"Points high inside the shaded span are decoders stalled behind the prefill.")
    if verdict is not None:
        cap += f" S1 verdict: {verdict.verdict}"
        mx = verdict.measured.get("max_itl_ms")
        cap += f" (max ITL {mx:.0f} ms, bound {bound:.0f} ms)." if mx is not None and bound else "."
    return fig, title, cap


# ---------------------------------------------------------------- entry point


def _lane_plots(lane: LaneResult, rec: LaneRecommendation | None,
                events: Sequence[RequestEvent]) -> Iterator[tuple[PlotKind, Drawn]]:
    from satbench.report.plots_gpu import gpu_plot  # it uses this module's axis helpers

    makers = {"throughput": lambda: _throughput(lane, rec), "latency": lambda: _latency(lane),
              "occupancy": lambda: _occupancy(lane), "gpu": lambda: gpu_plot(lane, rec),
              "timeline": lambda: _timeline(lane, events),
              "starvation": lambda: _starvation(lane, events)}
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
