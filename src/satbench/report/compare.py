"""`satbench compare RUN_A RUN_B`: B ÷ A per lane and level, with CIs and a significance rule
(docs/definitions.md#p95-across-repetitions).

A difference is significant when the ratio's 95 % CI (interval arithmetic on both runs' CIs, as
for interference) excludes 1 on the side of the ratio AND the effect |ratio − 1| is at least
`min_effect` (5 %). An open CI end is unknown, so it cannot exclude 1. Every CI used here spans the
repetitions: throughput's is Student-t over the repetitions' rates, a p95's Student-t over the
repetitions' own p95s (the pooled order-statistic CI would miss repetition-to-repetition variation),
so a side with fewer than 2 repetitions gives an open end and no significance. Runs whose lanes or
workloads differ are refused; different machines or llama.cpp builds are the point of comparing
and are only printed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, cast

from pydantic import Field
from rich.console import Console
from rich.table import Table
from rich.text import Text

from satbench.analysis.results import LaneResult, ResultsFile
from satbench.analysis.results import read_results as load_results
from satbench.config.schema import ServerParams, Strict, WorkloadConfig
from satbench.errors import UserError
from satbench.metrics.interference import P95Metric, Ratio, ratio_of_estimates, ratio_of_p95
from satbench.metrics.level_result import LevelResult
from satbench.metrics.specs import LEVEL_METRICS, figure
from satbench.records.manifest import HostInfo
from satbench.records.rundir import require_dir

MIN_EFFECT = 0.05
_EPS = 1e-9  # a ratio of exactly 1.05 is a 5 % effect despite float rounding

Scenario = Literal["solo", "together"]


class MetricComparison(Strict):
    metric: str
    a: float | None
    b: float | None
    ratio: Ratio = Field(description="B ÷ A with a conservative 95 % CI")
    significant: bool
    direction: Literal["better", "worse", "same"] = Field(
        description="better = more throughput or lower latency, and significant; same when not significant")


class LevelComparison(Strict):
    scenario: Scenario
    concurrency: int
    metrics: list[MetricComparison]


class LaneComparison(Strict):
    lane: str
    levels: list[LevelComparison]
    only_in_a: list[int] = Field(description="solo levels measured only in run A")
    only_in_b: list[int] = Field(description="solo levels measured only in run B")
    notes: list[str] = Field(default_factory=list)


class Comparison(Strict):
    run_a: str
    run_b: str
    header: list[str]
    lanes: list[LaneComparison]
    min_effect: float = MIN_EFFECT


# ---------------------------------------------------------------------------------------- loading

# ---------------------------------------------------------------------------------- compatibility

def _short(sha: str) -> str:
    return sha[:12]


def lane_differences(a: LaneResult, b: LaneResult) -> list[str]:
    """What makes lane `a` and lane `b` different workloads (empty: comparable)."""
    out = []
    if a.model.sha256 and b.model.sha256 and a.model.sha256 != b.model.sha256:
        out.append(f"model {_short(a.model.sha256)} in A, {_short(b.model.sha256)} in B")
    out += _field_diffs(a.workload, b.workload)
    if a.runtime.kind != b.runtime.kind:
        out.append(f"runtime {a.runtime.kind} in A, {b.runtime.kind} in B")
    return [f"lane {a.lane}: {d}" for d in out]


def run_differences(a: ResultsFile, b: ResultsFile) -> list[str]:
    """Every reason the two runs cannot be compared, lane set first."""
    names_a, names_b = [ln.lane for ln in a.lanes], [ln.lane for ln in b.lanes]
    out = [f"lane {n} only in A" for n in names_a if n not in names_b]
    out += [f"lane {n} only in B" for n in names_b if n not in names_a]
    by_name = {ln.lane: ln for ln in b.lanes}
    for lane in a.lanes:
        if lane.lane in by_name:
            out += lane_differences(lane, by_name[lane.lane])
    return out


# ------------------------------------------------------------------------------------------ header

def _build(lane: LaneResult) -> str:
    rt = lane.runtime
    return f"b{rt.build_number}" if rt.build_number else (rt.build_info or "n/a")


def _fingerprint(host: HostInfo) -> str:
    return host.fingerprint_sha256 or host.fingerprint()


def run_label(results: ResultsFile) -> str:
    """'build b11549 on 0123456789ab' (builds listed per lane when the lanes differ)."""
    builds = {ln.lane: _build(ln) for ln in results.lanes}
    if len(set(builds.values())) <= 1:
        build = f"build {next(iter(builds.values()), 'n/a')}"
    else:
        build = "builds " + ", ".join(f"{name} {b}" for name, b in builds.items())
    return f"{build} on {_short(_fingerprint(results.provenance.host))}"


def _machine(h: HostInfo) -> str:
    gpus = ", ".join(g.name for g in h.gpus) or "no GPU"
    return f"{h.cpu_model}, {h.cores_logical} cores, {h.ram_bytes / 2**30:.0f} GiB, {h.os}; {gpus}"


def header_lines(a: ResultsFile, b: ResultsFile, run_a: str, run_b: str) -> list[str]:
    lines = [f"A = {run_a} (run {a.run_id}) · B = {run_b} (run {b.run_id})",
             f"A: {run_label(a)} · B: {run_label(b)}"]
    ha, hb = a.provenance.host, b.provenance.host
    if _fingerprint(ha) != _fingerprint(hb) and not (ha.older_scheme_of(hb) or hb.older_scheme_of(ha)):
        lines.append(f"machines differ: A {_machine(ha)} · B {_machine(hb)}")
    for tag, r in (("A", a), ("B", b)):
        if r.status != "complete":
            lines.append(f"{tag}: run status {r.status}"
                         + (f" ({r.status_reason})" if r.status_reason else ""))
    return lines


# --------------------------------------------------------------------------------------- ratios

def is_significant(ratio: Ratio, min_effect: float = MIN_EFFECT) -> bool:
    """The CI excludes 1 on the ratio's side (an open end cannot) and |ratio − 1| ≥ min_effect."""
    v = ratio.value
    if v is None or abs(v - 1.0) < min_effect - _EPS:
        return False
    if v > 1.0:
        return ratio.ci_low is not None and ratio.ci_low > 1.0
    return ratio.ci_high is not None and ratio.ci_high < 1.0


def _metric(name: str, a: float | None, b: float | None, ratio: Ratio, higher_is_better: bool,
            min_effect: float) -> MetricComparison:
    sig = is_significant(ratio, min_effect)
    direction: Literal["better", "worse", "same"] = "same"
    if sig:
        direction = "better" if ((ratio.value or 0.0) > 1.0) == higher_is_better else "worse"
    return MetricComparison(metric=name, a=a, b=b, ratio=ratio, significant=sig, direction=direction)


COMPARED = tuple(s for s in LEVEL_METRICS if s.compare is not None)  # compare's figures, in order


def compare_level(a: LevelResult, b: LevelResult, scenario: Scenario,
                  min_effect: float = MIN_EFFECT) -> LevelComparison:
    """Each compared figure of one level (metrics/specs.py: throughput as the mean over repetitions,
    latencies as their pooled p95): B ÷ A, a p95's CI from its spread over repetitions (`ratio_of_p95`);
    a figure one of the levels lacks (the prompt cache's, without llama.cpp timings) is left out."""
    metrics = []
    for spec in COMPARED:
        fa, fb = figure(a, spec.path), figure(b, spec.path)
        if fa is None or fb is None:
            continue
        if spec.compare == "mean":
            ratio, va, vb = ratio_of_estimates(fb, fa), fa.value, fb.value
        else:
            ratio, va, vb = ratio_of_p95(b, a, cast(P95Metric, spec.compare_name)), fa.p95, fb.p95
        metrics.append(_metric(spec.compare_name, va, vb, ratio, spec.higher_is_better, min_effect))
    return LevelComparison(scenario=scenario, concurrency=a.concurrency, metrics=metrics)


# ------------------------------------------------------------------------------------------ lanes

def _levels(xs: list[int]) -> str:
    return ", ".join(map(str, xs)) or "none"


def _flag_kinds(lv: LevelResult) -> str:
    return ", ".join(dict.fromkeys(f.tag for f in lv.flags)) or "none"


def _flag_notes(pairs: list[tuple[int, LevelResult, LevelResult]], scenario: Scenario) -> list[str]:
    """'solo N=1, 2 flags: A few_samples · B none', levels with the same flag kinds grouped."""
    groups: dict[tuple[str, str], list[int]] = {}
    for n, a, b in pairs:
        if a.flags or b.flags:
            groups.setdefault((_flag_kinds(a), _flag_kinds(b)), []).append(n)
    return [f"{scenario} N={_levels(ns)} flags: A {fa} · B {fb}" for (fa, fb), ns in groups.items()]


def _pair_levels(a: list[LevelResult], b: list[LevelResult], scenario: Scenario, min_effect: float,
                 notes: list[str]) -> tuple[list[LevelComparison], list[int], list[int]]:
    """Compare the levels both lists hold; list the others; note the flags of compared levels."""
    by_a, by_b = {lv.concurrency: lv for lv in a}, {lv.concurrency: lv for lv in b}
    common = sorted(set(by_a) & set(by_b))
    rows = [compare_level(by_a[n], by_b[n], scenario, min_effect) for n in common]
    notes += _flag_notes([(n, by_a[n], by_b[n]) for n in common], scenario)
    return rows, sorted(set(by_a) - set(by_b)), sorted(set(by_b) - set(by_a))


def _field_diffs(a: WorkloadConfig | ServerParams, b: WorkloadConfig | ServerParams,
                 label: str = "") -> list[str]:
    """'<label><field> <A> in A, <B> in B' for each field of the two (same-typed) configs that differs."""
    return [f"{label}{f} {getattr(a, f)} in A, {getattr(b, f)} in B" for f in type(a).model_fields
            if getattr(a, f) != getattr(b, f)]


def _param_notes(a: LaneResult, b: LaneResult) -> list[str]:
    """Differences that do not block the comparison but change what it means."""
    notes = _field_diffs(a.server_params, b.server_params, "server ")
    if a.runtime.backend != b.runtime.backend:
        notes.append(f"backend {a.runtime.backend or 'n/a'} in A, {b.runtime.backend or 'n/a'} in B")
    for field, label in (("total_slots", "slots"), ("per_slot_ctx", "per-slot context")):
        va, vb = getattr(a.runtime, field), getattr(b.runtime, field)
        if va != vb:
            notes.append(f"{label} {'n/a' if va is None else va} in A, {'n/a' if vb is None else vb} in B "
                         "(as the servers reported them)")
    unknown = [tag for tag, ln in (("A", a), ("B", b)) if not ln.model.sha256]
    if unknown:
        notes.append(f"model identity not checked: no sha256 in {' and '.join(unknown)}")
    return notes


def _lacks_repetition_p95s(lane: LaneResult) -> bool:
    """Repetitions with a steady window but not one p95 of their own: a results.json written before
    satbench recorded them (its p95 ratios get no CI)."""
    reps = [r for lv in lane.levels + lane.together_levels for r in lv.repetitions if r.window_s is not None]
    return bool(reps) and all(r.p95_e2e_ms is None for r in reps)


def compare_lane(a: LaneResult, b: LaneResult, min_effect: float = MIN_EFFECT) -> LaneComparison:
    notes = _param_notes(a, b)
    notes += [f"{tag} has no per-repetition p95s (analyzed by an earlier satbench), so no p95 CI; "
              "`satbench analyze` on that run adds them" for tag, ln in (("A", a), ("B", b))
              if _lacks_repetition_p95s(ln)]
    rows, only_a, only_b = _pair_levels(a.levels, b.levels, "solo", min_effect, notes)
    if not rows:
        notes.append(f"no solo level in common (A: {_levels(only_a)}; B: {_levels(only_b)})")
    if a.together_levels and b.together_levels:
        t_rows, t_a, t_b = _pair_levels(a.together_levels, b.together_levels, "together", min_effect, notes)
        rows += t_rows
        if t_a or t_b:
            notes.append(f"together levels only in A: {_levels(t_a)}; only in B: {_levels(t_b)}")
    elif a.together_levels or b.together_levels:
        notes.append(f"together scenario only in {'A' if a.together_levels else 'B'}; not compared")
    return LaneComparison(lane=a.lane, levels=rows, only_in_a=only_a, only_in_b=only_b, notes=notes)


def compare_results(a: ResultsFile, b: ResultsFile, run_a: str, run_b: str,
                    min_effect: float = MIN_EFFECT) -> Comparison:
    """B ÷ A for every lane of A; UserError naming every difference when the runs are incomparable."""
    if not 0.0 <= min_effect < 1.0:
        raise UserError(f"minimum effect must be in [0, 1), got {min_effect}")
    diffs = run_differences(a, b)
    if diffs:
        raise UserError("cannot compare: " + "; ".join(diffs))
    by_name = {ln.lane: ln for ln in b.lanes}
    lanes = [compare_lane(ln, by_name[ln.lane], min_effect) for ln in a.lanes]
    return Comparison(run_a=run_a, run_b=run_b, header=header_lines(a, b, run_a, run_b),
                      lanes=lanes, min_effect=min_effect)


def compare_runs(run_a: Path, run_b: Path, min_effect: float = MIN_EFFECT) -> Comparison:
    """What the CLI calls: load both results.json files and compare them."""
    for run_dir in (run_a, run_b):
        require_dir(run_dir)  # as `satbench report` says it
    return compare_results(load_results(run_a), load_results(run_b), str(run_a), str(run_b), min_effect)


# -------------------------------------------------------------------------------------- printing

_COLUMNS = tuple((s.compare_name, s.compare_label) for s in COMPARED)
_MARKS = {"better": ("▲", "green"), "worse": ("▼", "red"), "same": ("", "")}


def _ci_end(x: float | None) -> str:
    """A CI end at 2 decimals, or more when that would print 1.00 for an end that is not 1 (the end
    that decides significance must not read as touching 1)."""
    if x is None:
        return "?"
    digits = 2
    while digits < 6 and x != 1.0 and f"{x:.{digits}f}" == f"{1.0:.{digits}f}":
        digits += 1
    return f"{x:.{digits}f}"


def ratio_cell(m: MetricComparison, min_effect: float = MIN_EFFECT) -> Text:
    """'×1.12 [1.05–1.20] ▲' (an open CI end prints as ?). A ratio within 0.005 of the effect
    threshold gets three decimals, so that ×1.045 (not significant) does not read as ×1.05."""
    r = m.ratio
    if r.value is None:
        return Text("n/a")
    digits = 3 if abs(abs(r.value - 1.0) - min_effect) < 0.005 else 2
    lo, hi = _ci_end(r.ci_low), _ci_end(r.ci_high)
    mark, style = _MARKS[m.direction]
    return Text(f"×{r.value:.{digits}f} [{lo}–{hi}]" + (f" {mark}" if mark else ""), style=style)


def lane_comparison_table(lane: LaneComparison, min_effect: float = MIN_EFFECT) -> Table:
    t = Table(title=f"lane {lane.lane}: B ÷ A (95% CI)", title_justify="left")
    held = {m.metric for lv in lane.levels for m in lv.metrics}
    columns = [(k, label) for k, label in _COLUMNS if k in held]  # a figure no level compared: no column
    for col in ("N", "scenario") + tuple(label for _, label in columns):
        t.add_column(col, justify="right", no_wrap=True)
    for lv in lane.levels:
        by_name = {m.metric: m for m in lv.metrics}
        t.add_row(str(lv.concurrency), lv.scenario,
                  *(ratio_cell(by_name[k], min_effect) if k in by_name else Text("n/a") for k, _ in columns))
    return t


def legend(min_effect: float = MIN_EFFECT) -> str:
    return (f"▲ better, ▼ worse (more throughput / lower latency is better): significant when the 95% CI "
            f"of B ÷ A excludes 1 and the change is at least {min_effect:.0%}; CIs span repetitions (p95: "
            f"t over the repetitions' own p95s); ? = open CI end (e.g. fewer than 2 repetitions), cannot "
            f"exclude 1")


def print_comparison(cmp: Comparison, console: Console | None = None) -> None:
    """Header lines, one table per lane with its unmatched levels and notes, then the legend."""
    if console is None:
        console = Console()
        if not console.is_terminal:
            console = Console(width=max(console.width, 132))

    def say(line: str) -> None:
        console.print(line, markup=False, highlight=False)

    for line in cmp.header:
        say(line)
    for lane in cmp.lanes:
        if lane.levels:
            console.print(lane_comparison_table(lane, cmp.min_effect))
        else:
            say(f"lane {lane.lane}: nothing to compare")
        if lane.levels and (lane.only_in_a or lane.only_in_b):
            say(f"  {lane.lane}: levels only in A: {_levels(lane.only_in_a)}; only in B: "
                f"{_levels(lane.only_in_b)}")
        for note in lane.notes:
            say(f"  {lane.lane}: {note}")
    say(legend(cmp.min_effect))
