"""The open-loop rates as tables: goodput against the offered rate, latency from arrival, and the
highest rate within the SLO (metrics/open_loop.py, saturation/open_rate.py). One row rule for the
terminal (rich) and for EVIDENCE.md / report.html (document blocks)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from satbench.analysis.results import LaneResult
from satbench.metrics.open_loop import RateResult
from satbench.report.cells import num_cell, pct_cell
from satbench.report.document import Block, Para, TableBlock
from satbench.saturation.recommendations_file import LaneRecommendation

RATE_HEADERS = ("rate /s", "done /s", "goodput /s", "SLO met", "TTFT p50/p95", "TPOT p95", "E2E p95",
                "wait p95", "in flight", "errors", "warnings")
RATE_LEGEND = ("open loop: Poisson arrivals at the offered rate, at most max_concurrency in flight (later "
               "arrivals wait in the client); TTFT and E2E are from arrival and include that wait; goodput = "
               "requests meeting every SLO target from arrival, per second; in flight = most at once of the "
               "cap; times in ms")


def rate_row(r: RateResult) -> list[str]:
    ttft = r.ttft_from_arrival_ms
    return [f"{r.rate_rps:g}", num_cell(r.completed_rps), num_cell(r.goodput_rps),
            num_cell(r.slo_attainment, "{:.0%}"), f"{pct_cell(ttft, 'p50')} / {pct_cell(ttft, 'p95')}",
            num_cell(r.tpot_ms.p95, "{:.1f}"), pct_cell(r.e2e_from_arrival_ms, "p95"),
            pct_cell(r.wait_ms, "p95"), f"{r.max_in_flight} / {r.max_concurrency}",
            ", ".join(f"{k} ×{v}" for k, v in r.errors.items()) or "0", ", ".join(r.warnings) or "-"]


def rate_line(r: LaneRecommendation) -> str | None:
    """The lane's rate recommendation in one line, None without open-loop rates."""
    if r.rate is None:
        return None
    best = "none" if r.rate.max_rate_rps is None else f"{r.rate.max_rate_rps:g} requests/s"
    return (f"highest rate within the SLO: {best} (max_concurrency {r.rate.max_concurrency}) — "
            f"{r.rate.reason}")


def rate_table(lane: LaneResult) -> Table:
    t = Table(title=f"lane {lane.lane}: open-loop rates", title_justify="left")
    for col in RATE_HEADERS:
        t.add_column(col, justify="right", overflow="fold")
    for r in lane.rates:
        t.add_row(*rate_row(r))
    return t


def print_rates(console: Console, lane: LaneResult) -> None:
    if lane.rates:
        console.print(rate_table(lane))
        console.print(RATE_LEGEND, markup=False, highlight=False)


def rate_blocks(lane: LaneResult) -> list[Block]:
    if not lane.rates:
        return []
    return [TableBlock(headers=list(RATE_HEADERS), rows=[rate_row(r) for r in lane.rates],
                       caption=f"{lane.lane}: open-loop rates (goodput against the offered rate)"),
            Para(text=RATE_LEGEND + ".")]
