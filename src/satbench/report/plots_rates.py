"""The goodput plot: what an open-loop lane served at each offered rate (metrics/open_loop.py).

Left: completed requests/s and goodput (requests meeting the SLO from arrival, per second) against
the offered rate, with y = rate for reference, and the highest rate within the SLO marked; right:
p50 / p95 TTFT from arrival (bars on p95: its 95 % CI) against the SLO's target. Drawn only when the
lane ran rates.
"""

from __future__ import annotations

from satbench.analysis.results import LaneResult
from satbench.report.plot_style import Drawn, lane_title, new_figure, p95_err
from satbench.saturation.recommendations_file import LaneRecommendation


def goodput_plot(lane: LaneResult, rec: LaneRecommendation | None) -> Drawn | None:
    rates = sorted(lane.rates, key=lambda r: r.rate_rps)
    if not rates:
        return None
    fig, (left, right) = new_figure("goodput", 2)
    xs = [r.rate_rps for r in rates]
    left.plot(xs, xs, color="tab:grey", linewidth=5, alpha=0.3, label="offered (y = rate)")
    done = [(r.rate_rps, r.completed_rps) for r in rates if r.completed_rps is not None]
    left.plot([p[0] for p in done], [p[1] for p in done], "o-", label="completed /s")
    good = [(r.rate_rps, r.goodput_rps) for r in rates if r.goodput_rps is not None]
    if good:
        left.plot([p[0] for p in good], [p[1] for p in good], "^-", color="tab:green", label="goodput /s")
    best = rec.rate.max_rate_rps if rec is not None and rec.rate is not None else None
    if best is not None:
        for ax in (left, right):
            ax.axvline(best, color="tab:green", linewidth=4, alpha=0.45, zorder=1.5)
    left.set_xlabel("offered rate (requests/s)")
    left.set_ylabel("requests per second")
    left.set_ylim(bottom=0)
    left.legend(loc="upper left")
    left.set_title("throughput and goodput")
    pts = [(r.rate_rps, d, d.p50, d.p95) for r in rates
           if (d := r.ttft_from_arrival_ms).p95 is not None and d.p50 is not None]
    right.plot([p[0] for p in pts], [p[2] for p in pts], "o-", label="TTFT p50 from arrival")
    errs = [p95_err(p[1]) for p in pts]
    right.errorbar([p[0] for p in pts], [p[3] for p in pts],
                   yerr=[[e[0] for e in errs], [e[1] for e in errs]], fmt="^-", capsize=3,
                   label="TTFT p95 from arrival")
    if lane.slo is not None:
        right.axhline(lane.slo.p95_ttft_ms, color="tab:red", linestyle=":", label="SLO p95 TTFT")
    right.set_xlabel("offered rate (requests/s)")
    right.set_ylabel("time to first token from arrival (ms)")
    right.set_ylim(bottom=0)
    right.legend(loc="upper left")
    right.set_title("TTFT from arrival")
    title = lane_title(lane, "open-loop goodput vs offered rate")
    fig.suptitle(title, fontsize=11)
    cap = (f"Poisson arrivals at each offered rate, at most {rates[0].max_concurrency} in flight (later ones "
           "wait in the client). Left: requests completed per second and goodput (those meeting every SLO "
           "target from their arrival); the wide grey line is the offered rate. Right: TTFT from arrival, "
           "wait included; bars on p95 = 95 % order-statistic CI.")
    if best is not None:
        cap += f" Green band: the highest rate within the SLO, {best:g}/s."
    return fig, title, cap
