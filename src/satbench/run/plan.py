"""What a sweep will run: request totals for the progress bar, the fairness server's shape, the
configuration it records. Pure functions of the configuration (and, for refinement, of the run so far)."""

from __future__ import annotations

from satbench.config.schema import LaneConfig, RunConfig, together_shape
from satbench.http.endpoint import split_credentials
from satbench.records.ledger import fairness_unit, open_unit, solo_unit, together_unit
from satbench.workload.fairness_plan import make_plan, request_count


def planned_units(cfg: RunConfig, refined: dict[str, list[int]] | None = None) -> list[tuple[str, int]]:
    """(unit, requests the progress bar expects of it) for every unit the configuration runs
    (a together step appears once per lane in it), with the extra levels --refine chose
    (`refined`: lane → levels, once known)."""
    def level(lane: LaneConfig, n: int) -> int:
        return lane.measured_requests(n) + n * lane.warmup_per_stream

    refined = refined or {}
    out: list[tuple[str, int]] = []
    if not cfg.fairness_only:
        out += [(unit, level(lane, n)) for lane in cfg.lanes
                for unit, n in _solo_units(lane, refined.get(lane.name, []))]
        out += [(open_unit(lane.name), sum(rates.arrivals(r) for r in rates.rates))
                for lane in cfg.lanes if (rates := lane.open_loop) is not None]
        if cfg.together:
            steps, reps = together_shape(cfg)
            out += [(together_unit(k, rep), level(lane, n)) for lane in cfg.lanes
                    for rep in range(1, reps + 1) for k, n in enumerate(lane.levels[:steps])]
    if cfg.with_fairness or cfg.fairness_only:
        out += [(fairness_unit(lane.name), request_count(make_plan(lane, lane.slots_wanted()), lane))
                for lane in cfg.lanes]
    return out


def _solo_units(lane: LaneConfig, refined: list[int]) -> list[tuple[str, int]]:
    """(unit, level) of the lane's solo part, as its profile plans it (`solo_steps`): fixed, every level
    × repetition (with `refined`); adaptive, the estimate the progress bar starts from (the sweep
    corrects it as the planner decides)."""
    return [(solo_unit(lane.name, n, rep), n) for n, rep in lane.profile.solo_steps(refined)]


def planned_solo_units(lane: LaneConfig) -> list[str]:
    """The solo units the progress bar expects of `lane` at the start (`_solo_units`)."""
    return [unit for unit, _ in _solo_units(lane, [])]


def total_requests(cfg: RunConfig, done: frozenset[str] = frozenset(),
                   refined: dict[str, list[int]] | None = None) -> int:
    """Requests the progress bar expects, but those of the units `done` (on --resume: finished,
    or skipped after a server failure)."""
    return sum(n for unit, n in planned_units(cfg, refined) if unit not in done)


def requests_in(cfg: RunConfig, units: list[str], refined: dict[str, list[int]] | None = None) -> int:
    """Requests the progress bar expected of these units (e.g. those a server failure skips)."""
    wanted = set(units)
    return sum(n for unit, n in planned_units(cfg, refined) if unit in wanted)


def fairness_lane(lane: LaneConfig) -> LaneConfig:
    """The lane as the fairness server runs it: same knobs, but a context big enough for the
    checks' longest prompts in every slot (unless the user fixed --ctx-size)."""
    if lane.server.n_ctx is not None:
        return lane
    slots = lane.slots_wanted()
    need = make_plan(lane, slots).per_slot_ctx_needed()
    return lane.model_copy(update={"server": lane.server.model_copy(update={"n_ctx": slots * need})})


def without_credentials(cfg: RunConfig) -> tuple[RunConfig, dict[str, str | None]]:
    """The configuration with every lane's URL stripped of its user:password (what the run records
    and prints), and lane name → the credentials taken out (None for a lane without)."""
    secrets: dict[str, str | None] = {}
    lanes = []
    for lane in cfg.lanes:
        secret = None
        if lane.runtime.url:
            clean, secret = split_credentials(lane.runtime.url)
            lane = lane.model_copy(update={"runtime": lane.runtime.model_copy(update={"url": clean})})
        secrets[lane.name] = secret
        lanes.append(lane)
    return cfg.model_copy(update={"lanes": lanes}), secrets
