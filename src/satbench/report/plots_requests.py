"""Per-request plots of a lane: the requests of its highest level as a timeline (queued,
prefill, decode, stalls, failures), and S1's decoders during the injected long prefill."""

from __future__ import annotations

import statistics
from collections.abc import Iterator, Sequence
from itertools import pairwise
from typing import Any

import numpy as np
from matplotlib.collections import PolyCollection

from satbench.analysis.results import LaneResult
from satbench.metrics.latency import first_token_ns
from satbench.records.events import RequestEvent
from satbench.report.plot_style import Drawn, lane_title, new_figure

MAX_BARS = 200
MARKERS = ("o", "s", "^", "v", "D", "x", "+")
STALL_FACTOR = 3.0
NS_PER_S = 1e9
NS_PER_MS = 1e6


# ---------------------------------------------------------------- timeline


def timeline_events(lane: LaneResult, events: Sequence[RequestEvent]) -> tuple[int, int, list[RequestEvent]]:
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


def token_gaps(e: RequestEvent) -> Iterator[tuple[int, int, float]]:
    """(start ns, end ns, ms per token) between consecutive token-carrying chunks."""
    ts = [(t, n) for t, n in e.chunks if n > 0]
    for a, b in pairwise(ts):
        yield a[0], b[0], (b[0] - a[0]) / NS_PER_MS / b[1]


def segments(e: RequestEvent) -> dict[str, tuple[int, int]]:
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


SEGMENT_STYLE: dict[str, dict[str, Any]] = {  # matplotlib Patch properties
    "queued": dict(facecolor="tab:orange", label="queued (estimate)"),
    "prefill": dict(facecolor="tab:purple", label="prefill (server prompt_ms)"),
    "waiting": dict(facecolor="tab:olive", label="sent → first token (no server timings)"),
    "decode": dict(facecolor="tab:blue", label="decode"),
    "stall": dict(facecolor="tab:red", label=f"stall (token gap > {STALL_FACTOR:g}× median)"),
    "failed": dict(facecolor="lightgrey", edgecolor="dimgrey", hatch="///", label="failed request"),
}


def bar_vertices(rows: Sequence[tuple[int, Sequence[tuple[float, float]]]]) -> np.ndarray:
    """The rectangles of `rows` ((row, [(start s, width s), ...]) each), as `Axes.broken_barh` draws one
    row: y from row − 0.4 to row + 0.4, x from start to start + width; shape (rectangles, 4, 2). One
    collection per segment kind draws the same pixels as a broken_barh per row, at a fraction of the
    cost (each collection is one artist to lay out and draw)."""
    verts = []
    for row, spans in rows:
        y0 = row - 0.4
        y1 = y0 + 0.8
        verts += [[(x0, y0), (x0, y1), (x0 + dx, y1), (x0 + dx, y0)] for x0, dx in spans]
    return np.array(verts, dtype=float)


def timeline_plot(lane: LaneResult, events: Sequence[RequestEvent]) -> Drawn | None:
    n, rep, reqs = timeline_events(lane, events)
    if not reqs:
        return None
    total, reqs = len(reqs), reqs[:MAX_BARS]
    t0 = reqs[0].sent_ns
    gaps = [g for e in reqs if e.ok for g in token_gaps(e)]
    median = statistics.median(g[2] for g in gaps) if gaps else None
    bars: dict[str, list[tuple[int, list[tuple[float, float]]]]] = {k: [] for k in SEGMENT_STYLE}
    for row, e in enumerate(reqs):
        for name, (a, b) in segments(e).items():
            bars[name].append((row, [((a - t0) / NS_PER_S, max(b - a, 0) / NS_PER_S)]))
        if median is not None and e.ok:
            stalls = [((a - t0) / NS_PER_S, (b - a) / NS_PER_S)
                      for a, b, ms in token_gaps(e) if ms > STALL_FACTOR * median]
            if stalls:
                bars["stall"].append((row, stalls))
    fig, (ax,) = new_figure("timeline")
    for name, rows in bars.items():
        if rows:
            style = dict(SEGMENT_STYLE[name])
            verts: Any = bar_vertices(rows)  # an array, as broken_barh passes it (the stubs: a sequence)
            ax.add_collection(PolyCollection(verts, label=style.pop("label"), linewidth=0, **style))
    ax.set_ylim(len(reqs) - 0.5, -0.5)
    ax.set_xlim(left=0)
    ax.set_xlabel("time since the first request was sent (s)")
    ax.set_ylabel("request (in order sent)")
    ax.grid(axis="y", visible=False)
    fig.legend(loc="outside lower center", ncols=min(4, sum(1 for rows in bars.values() if rows)),
               frameon=False)
    title = lane_title(lane, f"requests at N={n}, repetition {rep}")
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


def starvation_plot(lane: LaneResult, events: Sequence[RequestEvent]) -> Drawn | None:
    s1 = [e for e in events if e.lane == lane.lane and e.scenario == "fairness" and e.check == "S1"
          and e.phase != "warmup" and e.repetition == 1]  # the first injection (the verdict has them all)
    dec = sorted((e for e in s1 if e.role == "decoder"), key=lambda e: (e.sent_ns, e.stream))
    if not dec:
        return None
    t0 = dec[0].sent_ns
    fig, (ax,) = new_figure("starvation")
    drawn = False
    for i, e in enumerate(dec):
        pts = [((b - t0) / NS_PER_S, ms) for _, b, ms in token_gaps(e) if ms > 0]
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
    stat = next((s for s in verdict.statistics if s.name == "max_itl_ms"), None) if verdict else None
    bound = stat.bound if stat else None
    if bound:
        ax.axhline(bound, color="tab:red", linestyle=":", label=f"S1 bound on max ITL ({bound:.0f} ms)")
    ax.set_yscale("log")
    ax.set_xlim(left=0)
    ax.set_xlabel("time since the first decoder was sent (s)")
    ax.set_ylabel("inter-token latency (ms per token)")
    ax.legend(loc="best")
    title = lane_title(lane, "S1 decoders during a long prefill")
    ax.set_title(title)
    cap = (f"The first injection. Each point is one gap between tokens of a decoder ({len(dec)} decoders), "
           "plotted at the later "
           f"token's arrival; log scale. Shaded: the injected long prompt from sent to its first token. "
           f"Points high inside the shaded span are decoders stalled behind the prefill.")
    if verdict is not None:
        cap += f" S1 verdict: {verdict.verdict}"
        cap += (f" (max ITL {stat.estimate:.0f} ms, mean over {stat.n} injection(s), bound "
                f"{stat.bound:.0f} ms)." if stat else ".")
    return fig, title, cap
