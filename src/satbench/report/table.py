"""Terminal rendering of results: one rich table per lane, flags listed under it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from satbench.analysis.intervals import Statistic
from satbench.analysis.results import LaneResult, ResultsFile
from satbench.analysis.verdicts import Verdict
from satbench.metrics.flags import FlagKind, has_flag
from satbench.metrics.interference import Interference
from satbench.metrics.level_result import LevelResult
from satbench.metrics.slot_memory import size_text
from satbench.metrics.specs import LEVEL_METRICS, Cell, Columns, MetricSpec, figure, table_columns
from satbench.metrics.stats import Distribution, Estimate, Interval
from satbench.records.manifest import RuntimeInfo
from satbench.report.cells import num_cell, pct_cell
from satbench.report.rates import print_rates, rate_line


def _est(e: Estimate, digits: int = 1) -> str:
    """"value ±half" when the 95 % CI is symmetric about the value (as printed), else "value [low–high]"
    (a CI clipped at 0 is not symmetric: ± would claim a negative lower end)."""
    if e.value is None:
        return "n/a"
    if e.ci_low is None or e.ci_high is None:
        return f"{e.value:.{digits}f}"
    above, below = f"{e.ci_high - e.value:.{digits}f}", f"{e.value - e.ci_low:.{digits}f}"
    if above == below:
        return f"{e.value:.{digits}f} ±{above}"
    return f"{e.value:.{digits}f} [{e.ci_low:.{digits}f}–{e.ci_high:.{digits}f}]"


def _p50_p95(d: Distribution, digits: int = 0) -> str:
    """"p50/p95", with * when p95 comes from < 100 samples (its CI is listed under the table)."""
    return f"{pct_cell(d, 'p50', digits)}/{pct_cell(d, 'p95', digits)}{'*' if d.few_samples and d.n else ''}"


def server_phrase(rt: RuntimeInfo) -> str:
    """What served the lane: "url llama.cpp b11549 on CPU", or, for a server that is not llama.cpp
    (no build, backend or slots from /props), "url server, not llama.cpp"."""
    if not rt.llamacpp:
        return f"{rt.kind} server, not llama.cpp{' on ' + rt.backend if rt.backend else ''}"
    build = f"b{rt.build_number}" if rt.build_number else (rt.build_info or "build n/a")
    return f"{rt.kind} llama.cpp {build} on {rt.backend or 'n/a'}"


def lane_title(lane: LaneResult) -> str:
    rt = lane.runtime
    return (f"lane {lane.lane}: {lane.model.path or rt.model_alias or 'remote model'}"
            f"{' (SYNTHETIC weights)' if lane.model.synthetic else ''} · {server_phrase(rt)}"
            f" · slots {rt.total_slots if rt.total_slots is not None else 'n/a'}"
            " · prompt {} / output {} tokens".format(*lane.workload.length_texts()))


def _mib(v: int | None) -> str:
    return "n/a" if v is None else f"{v / 2**20:.0f}"


# how each kind of cell (metrics/specs.py Cell) prints its figure, to `digits` decimals
_CELLS: dict[Cell, Callable[[Any, int], str]] = {
    "int": lambda v, _: str(v),
    "estimate": _est,
    "p50/p95": _p50_p95,
    "p50": lambda d, digits: pct_cell(d, "p50", digits),
    "num1": lambda v, _: num_cell(v, "{:.1f}"),
    "mib": lambda v, _: _mib(v),
    "count": lambda v, _: str(len(v)) if v else "-",
    "pct": lambda v, digits: num_cell(v.value if isinstance(v, Estimate) else v, f"{{:.{digits}%}}"),
}
# the level table's columns every table has: (header, the figures in its cell), from the figures' specs
LEVEL_TABLE = table_columns()
LEVEL_HEADERS = tuple(header for header, _ in LEVEL_TABLE)
LEVEL_LEGEND = ("latencies in ms; ± = half the 95% CI over repetitions (a level measured once: from its "
                "batch means, where the sweep takes them), [low–high] = the 95% CI where it is "
                "not symmetric (a rate's CI is clipped at 0); * = p95 from < 100 samples (CI below); "
                "≈ = tokens counted as SSE chunks (the server reported no count); "
                "slots t/d/c = busy slots time-weighted / decode-weighted / client in-flight; "
                "queue = TTFT − prompt_ms − RTT (an estimate: llama.cpp stamps no queue time)")
# the figures an interference row holds (metrics/interference.py Interference), by their specs
_COMPARED_BY_NAME = {s.compare_name: s for s in LEVEL_METRICS if s.compare is not None}
INTERFERED = tuple(_COMPARED_BY_NAME[f] for f in Interference.model_fields if f in _COMPARED_BY_NAME)
INTERFERENCE_HEADERS = ("N", *(f"{s.compare_label} ratio" for s in INTERFERED))
VERDICT_HEADERS = ("check", "verdict", "estimate [CI] ≤ bound", "rounds", "how the bound was derived / why "
                   "inconclusive")
VERDICT_LEGEND = ("pass: every statistic's CI lies at or below its bound; fail: one CI lies above it; "
                  "marginal: a CI still straddles its bound after the check's top-up rounds (it does not "
                  "bind the recommendation); the CI's level is 1 − 5 % ÷ the looks its rounds allow "
                  "(Bonferroni), given under rounds; ∞: too few samples to bound that end")
RECOMMENDATION_HEADERS = ("lane", "recommended", "binding", "knee", "max under SLO", "slots", "out tok/s at "
                                                                                              "rec",
                          "p95 TTFT / TPOT ms [95% CI]", "USL peak N*")


MEMORY_HEADERS = ("lane", "model resident", "cache per slot", "per-slot ctx", "KV + state", "slots",
                  "left after loading", "slots that fit", "peak RSS")


def memory_row(lane: LaneResult) -> list[str]:
    """One lane's memory: llama.cpp's buffers as its server started (lanes[].memory) and the
    highest RSS of its levels; n/a where the server's log said nothing (a running server)."""
    m = lane.memory
    peak = max((lv.memory.peak_rss_bytes for lv in lane.levels if lv.memory.peak_rss_bytes), default=None)
    if m is None:
        return [lane.lane] + ["n/a"] * (len(MEMORY_HEADERS) - 2) + [size_text(peak)]
    on = {"gpu": " (GPU)", "gpu+host": " (GPU + RAM)"}.get(m.cache_on, "")
    left = ("n/a" if m.memory_left_bytes is None or m.memory_left_of is None
            else f"{size_text(m.memory_left_bytes)} {m.memory_left_of.upper()}")
    return [lane.lane, size_text(m.model_bytes), size_text(m.cache_bytes_per_slot) + on,
            "n/a" if m.per_slot_ctx is None else f"{m.per_slot_ctx:,}",
            f"{size_text(m.kv_bytes)} + {size_text(m.state_bytes)}", str(m.slots), left,
            "n/a" if m.slots_fit is None else f"{m.slots_fit:,}", size_text(peak)]


def fitted_tables(console: Console, title: str, more_title: str, headers: Sequence[str],
                  rows: list[list[str]]) -> list[Table]:
    """The table whole when it fits the console; else its columns split over several tables, each led
    by the first column (N), so that no figure is cut short. A piece too wide even then wraps its cells."""
    def build(cols: list[int], part_title: str | None, wrap: bool = False) -> Table:
        t = Table(title=part_title, title_justify="left")
        for i in cols:
            t.add_column(headers[i], justify="right", no_wrap=i == 0 or not wrap, overflow="fold",
                         min_width=max([len(headers[i])] + [len(r[i]) for r in rows]) if i == 0 else None)
        for row in rows:
            t.add_row(*(row[i] for i in cols))
        return t

    def fits(cols: list[int]) -> bool:
        unlimited = console.options.update_width(10**6)  # its natural width, not clipped to the console's
        return Measurement.get(console, unlimited, build(cols, None)).maximum <= console.width

    groups = [[0]]
    for i in range(1, len(headers)):
        if len(groups[-1]) > 1 and not fits(groups[-1] + [i]):
            groups.append([0])
        groups[-1].append(i)
    return [build(cols, title if k == 0 else more_title, wrap=not fits(cols))
            for k, cols in enumerate(groups)]


def lane_tables(console: Console, lane: LaneResult, levels: list[LevelResult] | None = None,
                scenario: str = "alone") -> list[Table]:
    """The lane's level table, with the columns its levels have figures for (specs.table_columns)."""
    levels = lane.levels if levels is None else levels
    columns = table_columns(levels)
    return fitted_tables(console, f"{lane_title(lane)} · {scenario}", f"lane {lane.lane} · {scenario}, "
                         "continued", [h for h, _ in columns], [level_row(lv, columns) for lv in levels])


def _ratio(r) -> str:
    if r.value is None:
        return "n/a"
    lo = "?" if r.ci_low is None else f"{r.ci_low:.2f}"
    hi = "?" if r.ci_high is None else f"{r.ci_high:.2f}"
    return f"{r.value:.2f} [{lo}–{hi}]"


def interference_tables(console: Console, lane: LaneResult) -> list[Table]:
    title = f"lane {lane.lane}: together with the other lanes ÷ alone (95% CI)"
    return fitted_tables(console, title, f"{title}, continued", INTERFERENCE_HEADERS,
                         [interference_row(r) for r in lane.interference])


def interference_row(row: Interference) -> list[str]:
    return [str(row.concurrency), *(_ratio(getattr(row, s.compare_name)) for s in INTERFERED)]


def approx_tokens(lv: LevelResult) -> str:
    """"≈" before the figures that count tokens, where the server never said how many it sent (the
    SSE chunks were counted instead): out tok/s, ITL and TPOT."""
    return "≈" if has_flag(lv.flags, FlagKind.TOKEN_COUNT_APPROXIMATE) else ""


def _spec_cell(lv: LevelResult, spec: MetricSpec, approx: str) -> str:
    t = spec.table
    assert t is not None
    return (approx if t.approx else "") + _CELLS[t.cell](figure(lv, spec.path), t.digits)


def level_row(lv: LevelResult, columns: Columns = LEVEL_TABLE) -> list[str]:
    """The level's cells under `columns`' headers (LEVEL_HEADERS unless given)."""
    approx = approx_tokens(lv)
    return ["/".join(_spec_cell(lv, spec, approx) for spec in specs) for _, specs in columns]


def ci_note(name: str, d: Distribution, digits: int = 0) -> str | None:
    ci = d.ci.get("p95")
    if not d.few_samples or not d.n or ci is None or d.p95 is None:
        return None
    lo = "?" if ci.low is None else f"{ci.low:.{digits}f}"
    hi = "unbounded" if ci.high is None else f"{ci.high:.{digits}f}"
    return f"{name} p95 {d.p95:.{digits}f} ms from n={d.n}, 95% CI [{lo}, {hi}]"


def level_ci_notes(lv: LevelResult, prefix: str = "") -> list[str]:
    """The CI of every p95 that level_row marks with * (TTFT, ITL, E2E), at the digits the row prints."""
    notes = (ci_note(f"{prefix}{s.label}", figure(lv, s.path), s.table.digits) for s in LEVEL_METRICS
             if s.table is not None and s.table.cell == "p50/p95")
    return [n for n in notes if n]


def _fmt(v: float | None, extra: int = 0) -> str:
    """3 significant digits below 10, whole numbers above; `extra` more digits either way."""
    if v is None:
        return "n/a"
    return f"{v:.{3 + extra}g}" if abs(v) < 10 else f"{v:.{extra}f}"


def _fmt_apart(v: float | None, bound: float | None) -> tuple[str, str]:
    """(measured, bound) with enough digits that unequal values never print alike: 0.9896 against
    a bound of 0.99 prints 0.9896 ≥ 0.99, not 0.99 ≥ 0.99 beside a fail."""
    extra = 0
    while (extra < 12 and v is not None and bound is not None and v != bound
           and _fmt(v, extra) == _fmt(bound, extra)):
        extra += 1
    return _fmt(v, extra), _fmt(bound, _decimals_needed(bound, extra))


def _decimals_needed(bound: float | None, extra: int) -> int:
    """The fewest extra digits (≤ extra) that print the bound exactly as with `extra` (1.1, not
    1.10000)."""
    return next((e for e in range(extra + 1)
                 if bound is None or float(_fmt(bound, e)) == float(_fmt(bound, extra))), extra)


def verdict_table(lane: LaneResult) -> Table:
    t = Table(title=f"lane {lane.lane}: fairness and starvation", title_justify="left",
              caption=VERDICT_LEGEND, caption_justify="left")
    for col in VERDICT_HEADERS:
        t.add_column(col, justify="left", overflow="fold")
    for v in lane.fairness:
        row = verdict_row(v)
        colour = {"pass": "green", "fail": "bold red", "marginal": "magenta",
                  "inconclusive": "yellow"}[v.verdict]
        row[1] = f"[{colour}]{v.verdict}[/]"
        t.add_row(*row)
    return t


def statistic_cell(s: Statistic, decided: bool = False) -> str:
    """"name estimate [low, high] ≤ bound", digits enough to tell each figure from the bound; the
    statistic's own decision after it when `decided` (a check with several)."""
    def apart(x: float | None, end: str) -> str:
        return end if x is None else _fmt_apart(x, s.bound)[0]
    cell = (f"{s.name} {apart(s.estimate, '')} [{apart(s.ci_low, '−∞')}, {apart(s.ci_high, '∞')}] ≤ "
            f"{_fmt_apart(s.estimate, s.bound)[1]}")
    return cell + (f" ({s.decision})" if decided else "")


def verdict_row(v: Verdict) -> list[str]:
    stats = "; ".join(statistic_cell(s, len(v.statistics) > 1) for s in v.statistics)
    level = f" (CI {100 * v.statistics[0].ci_level:.4g} %)" if v.statistics else ""
    rounds = f"{v.rounds} of ≤ {v.rounds_max}{level}" if v.rounds_max else "-"
    also = ", ".join(f"{k} {_fmt(x)}" for k, x in v.measured.items())
    why = (v.reason if v.verdict == "inconclusive" else v.derivation) or "-"
    return [f"{v.check} {v.name}", v.verdict, stats or "-", rounds, why + (f"; also {also}" if also else "")]


def status_line(results: ResultsFile, run_dir: Path | str | None = None) -> str | None:
    """How the run ended, for a run that did not complete; None for a complete one. A run still
    `running` on disk is one whose process died without a word (SIGKILL, power, OOM): `analyze`
    refuses a run directory a live sweep holds, so nobody is measuring it now."""
    if results.status == "complete":
        return None
    if results.status == "running":
        return (f"run status: running — the sweep stopped unexpectedly (killed?) before it recorded an end; "
                f"continue it with `satbench sweep --resume {run_dir or 'RUN_DIR'}`")
    return f"run status: {results.status}" + (f" — {results.status_reason}" if results.status_reason else "")


def print_results(results: ResultsFile, console: Console | None = None,
                  run_dir: Path | str | None = None) -> None:
    """The host line, each lane's tables, legend and notes (print_lane), then how the run ended."""
    if console is None:
        console = Console()
        if not console.is_terminal:
            console = Console(width=max(console.width, 132))
    h = results.provenance.host
    console.print(f"host: {h.cpu_model}, {h.cores_logical} cores, {h.ram_bytes / 2**30:.0f} GiB, {h.os}"
                  f"{'; ' + ', '.join(g.name for g in h.gpus) if h.gpus else ''} · fingerprint "
                  f"{h.fingerprint_sha256[:16]}", markup=False, highlight=False)
    for lane in results.lanes:
        print_lane(console, lane)
    if (status := status_line(results, run_dir)) is not None:
        console.print(status, markup=False, highlight=False)


def print_lane(console: Console, lane: LaneResult) -> None:
    """One lane: its level tables (alone, together, interference), the legend, memory, rates, fairness
    verdicts, then each level's CI notes and flags."""
    if lane.levels:
        console.print(*lane_tables(console, lane))
    if lane.together_levels:
        console.print(*lane_tables(console, lane, lane.together_levels, "together with the other lanes"))
        console.print(*interference_tables(console, lane))
    if lane.levels:
        console.print(LEVEL_LEGEND, markup=False, highlight=False)
    if lane.memory is not None:
        console.print(f"  {lane.lane}: memory: {lane.memory.statement}", markup=False, highlight=False)
    print_rates(console, lane)
    if lane.fairness:
        console.print(verdict_table(lane))
    for tag, levels in (("", lane.levels), (" together", lane.together_levels)):
        for lv in levels:
            for line in level_ci_notes(lv) + lv.flags:
                console.print(f"  {lane.lane}{tag} N={lv.concurrency}: {line}", markup=False, highlight=False)


def print_recommendations(recs, console: Console | None = None) -> None:
    """One line per lane: the recommendation, why, and what to expect there."""
    console = console or Console(width=132)
    t = Table(title="recommendations (recommendations.json)", title_justify="left")
    for col in RECOMMENDATION_HEADERS:
        t.add_column(col, overflow="fold")
    for r in recs.lanes:
        t.add_row(*recommendation_row(r))
    console.print(t)
    for r in recs.lanes:
        console.print(f"  {r.lane}: {r.binding.detail}", markup=False, highlight=False)
        for line in doubts(r):
            console.print(f"  {r.lane}: {line}", markup=False, highlight=False)
        console.print(f"  {r.lane}: server side {r.server_confirmation.statement}", markup=False,
                      highlight=False)
        if (rate := rate_line(r)) is not None:
            console.print(f"  {r.lane}: {rate}", markup=False, highlight=False)


def _p95_ci(v: float | None, ci: Interval | None, digits: int = 0) -> str:
    """"p95 [low–high]": recommendations.json keeps no sample count, so the CI is always printed
    (an open upper end, from too few samples, reads "unbounded")."""
    if v is None:
        return "n/a"
    if ci is None:
        return f"{v:.{digits}f}"
    lo = "?" if ci.low is None else f"{ci.low:.{digits}f}"
    hi = "unbounded" if ci.high is None else f"{ci.high:.{digits}f}"
    return f"{v:.{digits}f} [{lo}–{hi}]"


def _knee_cell(r) -> str:
    """The knee, or why there is none, taken from the knee's reason (a single level is not "still rising")."""
    if r.knee is not None:
        return str(r.knee)
    if r.knee_reason.startswith("throughput still gains") and not r.recommended_range:
        return "none (still rising)"
    return "undetermined" if r.recommended_range else f"none ({r.knee_reason})"


def doubts(r) -> list[str]:
    """What makes a lane's recommendation doubtful or undecided: undetermined, a curve that is not
    concave (or has a step the repetitions cannot classify), contended, its confidence, fairness
    checks left marginal."""
    out = []
    if r.undetermined is not None:
        out.append(f"UNDETERMINED — {r.undetermined}")
    if any(w in r.curve_shape for w in ("not concave", "unclear", "falling")):
        out.append(f"curve — {r.curve_shape}")
    if r.contended:
        out.append(f"CONTENDED — levels {', '.join(map(str, r.contended_levels))} ran while other processes "
                   "took CPU; the capability report refuses it unless --accept-contended")
    if r.confidence is not None:
        out.append(f"confidence — {r.confidence.statement}")
    out += [f"MARGINAL fairness (does not bind) — {line}" for line in r.fairness_marginal]
    out += [f"UNVERIFIED fairness — {line}" for line in r.fairness_unverified]
    return out


def recommended_cell(r) -> str:
    """The recommended concurrency as a cell: the number, "A (A to B?)" for the lower end of a range (not
    settled), or "none safe" (no measured level is at or below the binding limit); " (contended)" after it."""
    span = r.recommended_range
    rec = ("none safe" if r.recommended_concurrency is None
           else f"{span[0]} ({span[0]} to {span[1]}?)" if span else str(r.recommended_concurrency))
    return rec + (" (contended)" if r.contended else "")


def binding_cell(r) -> str:
    """The binding reason, with the saturated resource when one is named: "knee (gpu)"."""
    return r.binding.reason + (f" ({r.binding.resource})" if r.binding.resource else "")


def recommendation_row(r) -> list[str]:
    e = r.expected
    usl = f"{r.usl.peak_n:.0f}" if r.usl.peak_reported and r.usl.peak_n else "not reported"
    figures = (["n/a", "n/a"] if e is None else
               [_est(e.output_tok_per_s),
                f"{_p95_ci(e.p95_ttft_ms, e.p95_ttft_ci)} / {_p95_ci(e.p95_tpot_ms, e.p95_tpot_ci, 1)}"])
    return [r.lane, recommended_cell(r), binding_cell(r),
            _knee_cell(r),
            "n/a" if r.max_concurrency_under_slo is None else str(r.max_concurrency_under_slo),
            "n/a" if r.slots is None else str(r.slots), *figures, usl]
