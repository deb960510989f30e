"""What a sweep will run: request totals for the progress bar, refinement levels, the fairness
server's shape. Pure functions of the configuration (and, for refinement, of the run so far)."""

from __future__ import annotations

from pathlib import Path

from satbench.config.schema import LaneConfig, RunConfig
from satbench.load.fairness_plan import make_plan, request_count
from satbench.run.resume import fairness_unit, solo_unit, together_unit


def together_shape(cfg: RunConfig) -> tuple[int, int]:
    """(steps, repetitions) of the together scenario: only those every lane has, so that every
    together measurement runs under every lane's load."""
    return min(len(lane.levels) for lane in cfg.lanes), min(lane.repetitions for lane in cfg.lanes)


def not_together(cfg: RunConfig) -> list[str]:
    """One line per lane whose levels or repetitions the together scenario leaves out (another
    lane has fewer): those are measured alone only."""
    steps, reps = together_shape(cfg)
    out = []
    for lane in cfg.lanes:
        left = [f"N={n}" for n in lane.levels[steps:]]
        if lane.repetitions > reps:
            left.append(f"repetition{'s' if lane.repetitions - reps > 1 else ''} "
                        + ", ".join(str(r) for r in range(reps + 1, lane.repetitions + 1)))
        if left:
            out.append(f"lane {lane.name}: {', '.join(left)} measured alone only, not together (together runs "
                       f"the first {steps} level{'s' if steps > 1 else ''} × {reps} repetition"
                       f"{'s' if reps > 1 else ''}, what every lane has)")
    return out


def planned_units(cfg: RunConfig, refined: dict[str, list[int]] | None = None) -> list[tuple[str, int]]:
    """(unit, requests the progress bar expects of it) for every unit the configuration runs
    (a together step appears once per lane in it), with the extra levels --refine chose
    (`refined`: lane → levels, once known)."""
    def level(lane: LaneConfig, n: int) -> int:
        return lane.measured_requests(n) + n * lane.warmup_per_stream

    refined = refined or {}
    out: list[tuple[str, int]] = []
    if not cfg.fairness_only:
        out += [(solo_unit(lane.name, n, rep), level(lane, n)) for lane in cfg.lanes
                for rep in range(1, lane.repetitions + 1) for n in lane.levels + refined.get(lane.name, [])]
        if cfg.together:
            steps, reps = together_shape(cfg)
            out += [(together_unit(k, rep), level(lane, n)) for lane in cfg.lanes
                    for rep in range(1, reps + 1) for k, n in enumerate(lane.levels[:steps])]
    if cfg.with_fairness or cfg.fairness_only:
        out += [(fairness_unit(lane.name), request_count(make_plan(lane, lane.slots_wanted()), lane))
                for lane in cfg.lanes]
    return out


def total_requests(cfg: RunConfig, done: frozenset[str] = frozenset(),
                   refined: dict[str, list[int]] | None = None) -> int:
    """Requests the progress bar expects, but those of the units `done` (on --resume: finished,
    or skipped after a server failure)."""
    return sum(n for unit, n in planned_units(cfg, refined) if unit not in done)


def requests_in(cfg: RunConfig, units: list[str], refined: dict[str, list[int]] | None = None) -> int:
    """Requests the progress bar expected of these units (e.g. those a server failure skips)."""
    wanted = set(units)
    return sum(n for unit, n in planned_units(cfg, refined) if unit in wanted)


def refine_levels(run_dir: Path, lane: LaneConfig) -> list[int]:
    """2-3 levels inside the bracket where saturation sets in: below the knee when the step into it
    already scaled sub-linearly (< 90 % efficient: the real knee lies below), else above it.
    Without a knee, between the top two levels if the last step scaled sub-linearly; else none."""
    from satbench.analysis.analyze import analyze_run
    from satbench.saturation.knee import Point, marginal_gain_knee

    result = next((r for r in analyze_run(run_dir).lanes if r.lane == lane.name), None)
    if result is None:
        return []
    pts = [Point(n=lv.concurrency, x=lv.throughput.output_tok_per_s.value, ci_low=lv.throughput.output_tok_per_s.ci_low,
                 ci_high=lv.throughput.output_tok_per_s.ci_high) for lv in result.levels
           if lv.throughput.output_tok_per_s.value]
    if len(pts) < 2:
        return []
    pts.sort(key=lambda p: p.n)
    knee = marginal_gain_knee(pts).knee
    at = next(i for i, p in enumerate(pts) if p.n == knee) if knee is not None else len(pts) - 1

    def efficient(lo: int, hi: int) -> bool:
        return (pts[hi].x / pts[lo].x) / (pts[hi].n / pts[lo].n) >= 0.9

    if at > 0 and not efficient(at - 1, at):
        lo, hi = pts[at - 1].n, pts[at].n
    elif at + 1 < len(pts):
        lo, hi = pts[at].n, pts[at + 1].n
    else:
        return []
    return sorted({round(lo + (hi - lo) * i / 4) for i in (1, 2, 3)} - {lo, hi})


def fairness_lane(lane: LaneConfig) -> LaneConfig:
    """The lane as the fairness server runs it: same knobs, but a context big enough for the
    checks' longest prompts in every slot (unless the user fixed --ctx-size)."""
    if lane.server.n_ctx is not None:
        return lane
    slots = lane.slots_wanted()
    need = make_plan(lane, slots).per_slot_ctx_needed()
    return lane.model_copy(update={"server": lane.server.model_copy(update={"n_ctx": slots * need})})
