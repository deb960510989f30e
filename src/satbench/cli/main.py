"""Command line: parse → typed config → library call → exit code. User errors: one line, no traceback."""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from satbench.cli.args import build_parser, run_config, run_flags_given
from satbench.cli.commands_fleet import cmd_fleet
from satbench.cli.commands_read import (
    cmd_analyze,
    cmd_capability,
    cmd_compare,
    cmd_models,
    cmd_recommend,
    cmd_report,
    cmd_schema,
    cmd_verify,
    show_recommendations,
    show_report,
)
from satbench.cli.completion import cmd_completion
from satbench.cli.exits import FAIRNESS_FAILED, INTERNAL_ERROR, INTERRUPTED, OK
from satbench.config.schema import RunConfig
from satbench.errors import Interrupted, SatbenchError, ServerGoneError, UserError
from satbench.http.endpoint import redact_url
from satbench.records.rundir import refuse_if_in_use

if TYPE_CHECKING:
    from satbench.analysis.results import ResultsFile
    from satbench.cli.output import SweepOutput
    from satbench.run.lane_session import Progress
    from satbench.run.sweep import Sweep

TRACEBACK_ENV = "SATBENCH_TRACEBACK"  # set (to anything) to see an internal error's traceback


def _sigterm_as_interrupt(sweep) -> Callable[[int, object], None]:
    """A SIGTERM handler that makes SIGTERM a SIGINT, so that it takes Ctrl-C's path exactly:
    inside the event loop, asyncio.run's own SIGINT handler cancels the sweep and lets every
    `finally` run before KeyboardInterrupt leaves it. Raising KeyboardInterrupt here instead could
    land in the selector, outside any task, and leave the sweep's coroutine to be torn down at
    exit. The run's status_reason then says SIGTERM, not Ctrl-C."""
    def handler(signum: int, frame: object) -> None:
        sweep.interrupted_by = "SIGTERM (kill, timeout or a service stop)"
        signal.raise_signal(signal.SIGINT)
    return handler


def _cmd_sweep(a: argparse.Namespace) -> int:
    """sweep and fairness: a new run, or --resume RUN_DIR; with --json, the run's document after it."""
    from satbench.pipeline import new_sweep
    from satbench.records.rundir import default_run_dir
    from satbench.report.progress import RichProgress
    from satbench.run.lane_session import SilentProgress

    argv = [redact_url(x) for x in ["satbench", *a.argv]]
    progress = SilentProgress() if a.quiet else RichProgress()
    if a.resume:
        from satbench.run.resume import derive_only, resumable_manifest

        if a.output:
            raise UserError("--resume continues RUN_DIR in place; drop -o")
        run_dir = Path(a.resume)
        resume = resumable_manifest(run_dir)
        if derive_only(run_dir, resume):
            code = _derive_complete_run(run_dir)
        else:
            from satbench.run.server_preflight import remote_preflight, server_preflight

            cfg = run_config(a) if run_flags_given(a) else resume.config
            remote_preflight(cfg)
            server_preflight(cfg, bool(a.lanes) or len(cfg.lanes) > 1)
            code = _run_sweep(new_sweep(cfg, run_dir, argv, progress, resume=resume), run_dir)
    else:
        cfg = run_config(a)
        run_dir = Path(a.output) if a.output else default_run_dir()
        code = sweep_new_run(cfg, run_dir, argv, progress, bool(a.lanes) or len(cfg.lanes) > 1)
    if a.json:
        from satbench.cli.output import emit

        emit(a, _sweep_output(a.command, run_dir, code))
    return code


def _sweep_output(command: Literal["sweep", "fairness"], run_dir: Path, code: int) -> SweepOutput:
    """What sweep --json prints: the run as its directory holds it now."""
    from satbench.analysis.results import read_results
    from satbench.cli.output import SweepOutput
    from satbench.records.layout import RECOMMENDATIONS_FILE, RESULTS_FILE
    from satbench.records.manifest import read_manifest
    from satbench.saturation.recommendations_file import RecommendationsFile

    manifest = read_manifest(run_dir)
    recs = run_dir / RECOMMENDATIONS_FILE
    return SweepOutput(
        command=command, run_dir=str(run_dir), status=manifest.status, exit_code=code,
        server_failures=[f.reason for f in manifest.server_failures],
        results=read_results(run_dir) if (run_dir / RESULTS_FILE).exists() else None,
        recommendations=RecommendationsFile.model_validate_json(recs.read_text()) if recs.exists() else None)


def sweep_new_run(cfg: RunConfig, run_dir: Path, argv: list[str], progress: Progress, lane_file: bool) -> int:
    """A new run of `cfg` into `run_dir` (which must not hold a run), as `satbench sweep` does it:
    api.prepare_sweep (preflight, the directory), measure, derive, report; the exit code. Also what a
    fleet node runs (cli.commands_fleet)."""
    from satbench.api import prepare_sweep

    sweep = prepare_sweep(cfg, run_dir, progress=progress, command_line=argv, lane_file=lane_file)
    return _run_sweep(sweep, run_dir)


def _run_sweep(sweep: Sweep[ResultsFile], run_dir: Path) -> int:
    with _interruptible(sweep):
        try:
            results = sweep.run()
        except KeyboardInterrupt as exc:
            raise Interrupted(_interrupted_words(run_dir)) from exc
        except SatbenchError as exc:
            exc.args = (f"{exc} (run directory: {run_dir})",)
            raise
        return _finish_sweep(run_dir, results)


@contextlib.contextmanager
def _interruptible(sweep: object) -> Iterator[None]:
    """SIGTERM taken as Ctrl-C, and Ctrl-C always delivered, from the first measurement to the last
    file of the report (the derivation too: an interrupt there must say so, not kill silently)."""
    # kill / timeout / systemd stop = Ctrl-C
    previous = signal.signal(signal.SIGTERM, _sigterm_as_interrupt(sweep))
    # a shell starts `satbench sweep &` with SIGINT ignored, and then the SIGINT that SIGTERM raises
    # would be ignored too: Ctrl-C (and so SIGTERM) must always reach the sweep
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)


def _interrupted_words(run_dir: Path) -> str:
    """What an interrupted sweep says: the status run.json holds, and how to finish the run."""
    from satbench.records.manifest import read_manifest

    status: str
    try:
        status = read_manifest(run_dir).status
    except SatbenchError:
        status = "unknown"
    if status == "complete":  # the measurements were over: the interrupt came while deriving
        return _derivation_interrupted(run_dir)
    return f"interrupted; what was measured is in {run_dir} (status: {status})"


def _derivation_interrupted(run_dir: Path) -> str:
    return (f"interrupted while writing the results and report; the measurements are complete "
            f"(status: complete): run `satbench report {shlex.quote(str(run_dir))}`")


def _derive_complete_run(run_dir: Path) -> int:
    """`sweep --resume` of a complete run whose report is missing (a derivation cut short): measure
    nothing, derive everything from the raw files, end as the sweep would have."""
    from satbench.pipeline import SweepDerivation
    from satbench.records.layout import clear_derived

    refuse_if_in_use(run_dir)
    print(f"satbench: {run_dir}: the run is complete but its report is missing: writing it (nothing is "
          "measured again)", file=sys.stderr)
    with _interruptible(types.SimpleNamespace()):
        try:
            clear_derived(run_dir)
            results = SweepDerivation().derive(run_dir)
        except KeyboardInterrupt as exc:
            raise Interrupted(_derivation_interrupted(run_dir)) from exc
        return _finish_sweep(run_dir, results)


def _finish_sweep(run_dir: Path, results) -> int:
    """The measured run's table, recommendations and report, then its failures (each named, those of
    an earlier session as such) and the exit code. An interrupt here leaves run.json complete and
    says which command finishes the report."""
    from satbench.analysis.results import verdicts_of
    from satbench.pipeline import derive_after_sweep
    from satbench.records.ledger import is_start_unit
    from satbench.records.manifest import read_manifest
    from satbench.report.table import print_results

    try:
        print_results(results)
        derive_after_sweep(run_dir, results, show_recommendations, show_report)
    except KeyboardInterrupt as exc:
        raise Interrupted(_derivation_interrupted(run_dir)) from exc
    print(f"run directory: {run_dir}")
    verdicts = verdicts_of(results)
    manifest = read_manifest(run_dir)  # its failures include a lane whose server never started (no results)
    started = manifest.provenance.lanes if manifest.provenance else {}
    failures = [f for f in manifest.server_failures if not (is_start_unit(f.unit) and f.lane in started
                                                              and f.scenario == "solo")]
    if failures:
        session = len(manifest.resumes)
        for f in failures:
            below = f.level > 0
            earlier = f"in session {f.session}: " if f.session < session else ""
            print(f"satbench: {earlier}{f.reason}; the rest of the run was measured and written"
                  + (" (recommendations stay below that level)" if below else ""), file=sys.stderr)
        return ServerGoneError.exit_code
    if verdicts is not None and verdicts.any_failed:
        print("satbench: a fairness or starvation check failed (see the verdict table)", file=sys.stderr)
        return FAIRNESS_FAILED
    return OK


def fleet_node_sweep(cfg: RunConfig, run_dir: Path, progress: Progress) -> tuple[int, str | None]:
    """What a fleet node runs (inside its Ray task): a new sweep of `cfg` as `satbench sweep --lanes`
    runs it; (exit code, the error line or None)."""
    try:
        return sweep_new_run(cfg, run_dir, ["satbench", "fleet", "run"], progress, True), None
    except SatbenchError as exc:
        return exc.exit_code, str(exc)


def _cmd_fleet(a: argparse.Namespace) -> int:
    return cmd_fleet(a, fleet_node_sweep)


COMMANDS = {"sweep": _cmd_sweep, "fairness": _cmd_sweep, "analyze": cmd_analyze, "schema": cmd_schema,
            "models": cmd_models, "recommend": cmd_recommend, "capability": cmd_capability,
            "report": cmd_report, "verify": cmd_verify, "compare": cmd_compare, "fleet": _cmd_fleet,
            "completion": cmd_completion}


def main(argv: list[str] | None = None) -> int:
    try:
        argv = sys.argv[1:] if argv is None else argv
        args = build_parser().parse_args(argv)
        args.argv = list(argv)  # what the user typed, recorded in run.json (credentials redacted)
        args.stdout = sys.stdout  # where --json's document goes (cli.output.emit)
        if args.json or (args.quiet and not args.stdout_product):
            with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):  # the tables, silenced
                return COMMANDS[args.command](args)
        return COMMANDS[args.command](args)
    except SatbenchError as exc:
        print(f"satbench: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("satbench: interrupted", file=sys.stderr)
        return INTERRUPTED
    except OSError as exc:  # a path the system refuses where no reader said why (too long, no access)
        if os.environ.get(TRACEBACK_ENV):
            raise
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"satbench: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return UserError.exit_code
    except Exception as exc:  # a bug: still one line; the traceback on request
        if os.environ.get(TRACEBACK_ENV):
            raise
        why = " ".join(str(exc).split())[:300]
        print(f"satbench: internal error: {exc.__class__.__name__}: {why} (a bug in satbench; "
              f"{TRACEBACK_ENV}=1 shows where)", file=sys.stderr)
        return INTERNAL_ERROR


if __name__ == "__main__":
    sys.exit(main())
