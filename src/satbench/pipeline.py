"""The one place that composes the deriving stages: raw files → results (analysis) →
recommendations (saturation) → report, computing what is missing, and the derivation a sweep is
given (`SweepDerivation`). The CLI and every other caller go through here; no stage calls a later one."""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from satbench.analysis.results import ResultsFile, read_results
from satbench.records.layout import RECOMMENDATIONS_FILE, RESULTS_FILE

if TYPE_CHECKING:  # annotations only (the measuring side, run.*, is imported by a sweep alone)
    from satbench.config.schema import CheckName, FairnessConfig, LaneConfig, RunConfig
    from satbench.records.events import RequestEvent
    from satbench.records.manifest import PlanDecision, RunManifest
    from satbench.report.bundle import ReportFiles
    from satbench.report.integrity import Verification
    from satbench.run.context import PlanTick
    from satbench.run.lane_session import Progress
    from satbench.run.sweep import Sweep
    from satbench.saturation.recommendations_file import RecommendationsFile
    from satbench.workload.fairness_plan import FairnessPlan

# Each stage is imported where it is first used: `recommend` needs neither the per-level metrics
# (numpy) nor the report; `analyze` needs neither the planner nor the report.


class Judge:
    """The fairness runner's view of the verdicts (`satbench.run.fairness_traffic.FairnessJudge`): the very
    functions `analyze` uses, so a check tops up exactly while its recorded verdict would be marginal."""

    def verdict(self, check: CheckName, events: Sequence[RequestEvent], plan: FairnessPlan,
                cfg: FairnessConfig) -> str:
        from satbench.analysis.checks import check_verdict

        return check_verdict(check, events, plan, cfg).verdict

    def prefill_tok_per_s(self, calibration: Sequence[RequestEvent]) -> float | None:
        from satbench.analysis.verdicts import calibrate

        return calibrate(calibration).prefill_tok_per_s

    def references_unsteady(self, check: CheckName, events: Sequence[RequestEvent]) -> bool:
        from satbench.analysis.checks import unsteady_references

        return unsteady_references(check, events) is not None


FAIRNESS_JUDGE = Judge()


class SweepDerivation:
    """What a sweep asks of the deriving side (`satbench.run.context.Derivation`), its results a
    ResultsFile."""

    judge = FAIRNESS_JUDGE

    def refine_levels(self, run_dir: Path, lane: LaneConfig) -> list[int]:
        from satbench.analysis.analyze import analyze_run
        from satbench.saturation.refine import refine_levels

        results = analyze_run(run_dir)
        return refine_levels(next((r for r in results.lanes if r.lane == lane.name), None))

    def planner(self, run_dir: Path, lane: LaneConfig, slots: int | None, past_slots: bool,
                recorded: list[PlanDecision]) -> Generator[PlanDecision, PlanTick, None]:
        """saturation.planner.plan_lane, each tick turned into its Feedback: the lane's solo levels as
        the raw files hold them now."""
        from satbench.analysis.analyze import analyze_run, solo_levels
        from satbench.config.profiles import AdaptiveSweep
        from satbench.records.events import EVENTS_FILE, SAMPLES_FILE
        from satbench.records.manifest import read_manifest
        from satbench.records.samples import SampleBuilder
        from satbench.records.tail import JsonlTail
        from satbench.saturation.planner import Feedback, PlanContext, plan_lane
        from satbench.saturation.recommend import checks_cap

        profile = lane.profile
        assert isinstance(profile, AdaptiveSweep)
        ceiling, why = lane.ceiling(slots), None
        found = read_manifest(run_dir)
        lp = found.provenance.lanes.get(lane.name) if found.provenance is not None else None
        if lp is not None and lp.fairness_runtime is not None:  # the checks ran first: they cap the climb
            checked = next((r for r in analyze_run(run_dir).lanes if r.lane == lane.name), None)
            cap, cap_why = checks_cap(checked) if checked is not None else (None, None)
            if cap is not None and cap < ceiling:
                ceiling, why = cap, cap_why
        ctx = PlanContext(lane=lane.name, adaptive=profile.adaptive, ceiling=ceiling, slots=slots,
                          past_slots=past_slots, slo=lane.slo, ceiling_why=why)
        inner = plan_lane(ctx, recorded)
        events, samples = JsonlTail(run_dir / EVENTS_FILE), JsonlTail(run_dir / SAMPLES_FILE, samples=True)
        records: list = []
        readings = SampleBuilder()
        tick = yield next(inner)
        while True:
            records += [r for r in events.read() if r.lane == lane.name and r.scenario == "solo"]
            for s in samples.read():
                if s.lane == lane.name and s.scenario == "solo":
                    readings.add(s)
            so_far = readings.build(keep_growing=True)
            levels = solo_levels(read_manifest(run_dir), lane.name, records, so_far)
            try:
                tick = yield inner.send(Feedback(levels, tick.elapsed_s, tick.last_step_s, tick.failed_at))
            except StopIteration:
                return

    def derive(self, run_dir: Path) -> ResultsFile:
        return analyze_and_write(run_dir)

    def stale_note(self, run_dir: Path, rewritten: list[str]) -> str | None:
        from satbench.report.integrity import stale_sums_note

        return stale_sums_note(run_dir, rewritten)


def new_sweep(cfg: RunConfig, run_dir: Path, command_line: list[str], progress: Progress | None = None,
              resume: RunManifest | None = None,
              liveness_timeout_s: float | None = None) -> Sweep[ResultsFile]:
    """A sweep whose recorded run is derived by this pipeline; `liveness_timeout_s`: every lane
    session's liveness bound (None: LIVENESS_TIMEOUT_S)."""
    from satbench.load.liveness import LIVENESS_TIMEOUT_S
    from satbench.run.sweep import Sweep

    bound_s = LIVENESS_TIMEOUT_S if liveness_timeout_s is None else liveness_timeout_s
    return Sweep(cfg, run_dir, command_line, SweepDerivation(), progress, resume, bound_s)


def analyze_and_write(run_dir: Path) -> ResultsFile:
    """analysis.analyze.analyze_and_write: results.json (and verdicts.json) derived from the raw files
    and written."""
    from satbench.analysis import analyze

    return analyze.analyze_and_write(run_dir)


def results(run_dir: Path) -> ResultsFile:
    """results.json, computed from the raw files (and written) first when it is missing."""
    if not (run_dir / RESULTS_FILE).exists():
        return analyze_and_write(run_dir)
    return read_results(run_dir)


def recommendations(run_dir: Path, found: ResultsFile | None = None) -> tuple[RecommendationsFile, Path]:
    """recommendations.json from results.json (`found`: its content, in memory), written:
    (recommendations, its path)."""
    from satbench.saturation.recommend import recommend
    from satbench.saturation.recommendations_file import write_recommendations

    recs = recommend(run_dir, found)
    return recs, write_recommendations(run_dir, recs)


def derive_after_sweep(run_dir: Path, found: ResultsFile,
                       on_recommendations: Callable[[RecommendationsFile, Path], None],
                       on_report: Callable[[ReportFiles], None]) -> None:
    """After a sweep's results (`found`, derived once and handed on in memory): its recommendations
    (when a lane has levels), then the report; each handed to its callback as soon as it is written."""
    if any(lane.levels for lane in found.lanes):
        on_recommendations(*recommendations(run_dir, found))
    on_report(report(run_dir, found))


def report(run_dir: Path, found: ResultsFile | None = None) -> ReportFiles:
    """The evidence bundle; results.json and recommendations.json (when a lane has levels) are
    computed first when missing (`found`: results.json's content, in memory). Nothing is written
    when the bundle's targets are refused."""
    from satbench.report import bundle
    from satbench.saturation.recommend import recommend
    from satbench.saturation.recommendations_file import write_recommendations

    bundle.check_targets(run_dir)
    found = found if found is not None else results(run_dir)
    if not (run_dir / RECOMMENDATIONS_FILE).exists() and any(lane.levels for lane in found.lanes):
        write_recommendations(run_dir, recommend(run_dir, found))
    return bundle.write_bundle(run_dir, found)


def verify(run_dir: Path) -> Verification:
    """SHA256SUMS checked, and the derived files compared with a fresh derivation of the raw files."""
    from satbench.analysis.analyze import analyze_run
    from satbench.report import integrity

    return integrity.verify(run_dir, analyze_run)
