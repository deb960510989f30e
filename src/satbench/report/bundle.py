"""`satbench report RUN_DIR`: the evidence bundle, written into the run directory.

raw files → (analyze) results.json, verdicts.json → (recommend) recommendations.json →
plots/*.png, results.csv, EVIDENCE.md, report.html → SHA256SUMS (last, over everything).
This module writes the last stage from given results; `satbench.pipeline` computes any derived JSON
that is missing first, so `report` alone rebuilds the same bundle. Every file it writes, and
plots/, are checked by the run directory's rule (satbench.records.rundir) before the first is written:
a link where one of them goes refuses the report, naming it, with nothing written.
"""

from __future__ import annotations

import hashlib
import shlex
import shutil
from pathlib import Path

from pydantic import ValidationError

from satbench.analysis.results import ResultsFile
from satbench.config.schema import Strict
from satbench.errors import RunDirError
from satbench.records.events import RequestEvent, read_events
from satbench.records.layout import (
    CSV_FILE,
    EVIDENCE_FILE,
    HTML_FILE,
    PLOTS_DIR,
    RECOMMENDATIONS_FILE,
    RESULTS_FILE,
    SUMS_FILE,
    VERDICTS_FILE,
)
from satbench.records.manifest import read_manifest, write_text_atomic
from satbench.records.rundir import (
    check_run_subdir,
    check_run_subdir_files,
    check_writable_file,
    make_run_subdir,
    read_regular_file,
    require_dir,
)
from satbench.report.csvfile import write_csv
from satbench.report.document import render_html, render_markdown
from satbench.report.evidence import evidence_blocks
from satbench.report.integrity import MAX_DERIVED_BYTES, raw_hashes, write_sums
from satbench.report.plot_file import PlotFile
from satbench.saturation.recommendations_file import RecommendationsFile

WRITTEN_FILES = (RESULTS_FILE, VERDICTS_FILE, RECOMMENDATIONS_FILE, CSV_FILE, EVIDENCE_FILE, HTML_FILE,
                 SUMS_FILE)  # (plots/ besides)


class ReportFiles(Strict):
    evidence: str
    html: str
    csv: str
    plots: list[PlotFile]
    bundle_digest: str


def read_recommendations(run_dir: Path) -> tuple[RecommendationsFile | None, str | None]:
    """(recommendations, sha256 of its file); (None, None) when the run has none."""
    path = run_dir / RECOMMENDATIONS_FILE
    if not path.exists():
        return None, None
    text = read_regular_file(path, MAX_DERIVED_BYTES)  # a regular file only: a named pipe never blocks
    try:
        return RecommendationsFile.model_validate_json(text), hashlib.sha256(text).hexdigest()
    except (ValueError, ValidationError) as exc:
        raise RunDirError(f"{path} is not a valid recommendations file ({exc.__class__.__name__}); "
                          f"delete it and run `satbench recommend {shlex.quote(str(run_dir))}`") from exc


def _fresh_plots_dir(run_dir: Path) -> None:
    """plots/ emptied of an older report's plots (which must not linger), as a real directory.
    rmtree unlinks the links it finds there and never follows one."""
    plots_dir = run_dir / PLOTS_DIR
    check_run_subdir(plots_dir)
    try:
        if plots_dir.exists():
            shutil.rmtree(plots_dir)
    except OSError as exc:
        raise RunDirError(f"cannot remove the old plots in {plots_dir}: {exc.strerror or exc}") from exc
    make_run_subdir(plots_dir)


def check_targets(run_dir: Path) -> None:
    """Refuse, before anything is written, a report whose files or plots/ the run directory's rule
    refuses (a link where one of them goes)."""
    require_dir(run_dir)
    for name in WRITTEN_FILES:
        check_writable_file(run_dir / name)
    check_run_subdir_files(run_dir / PLOTS_DIR)  # the old plots are removed, but a link there is refused


def write_bundle(run_dir: Path, results: ResultsFile) -> ReportFiles:
    """Plots, results.csv, EVIDENCE.md and report.html from `results` and the run's
    recommendations.json (if any), then SHA256SUMS over everything; `check_targets` first."""
    from satbench.report.plots import write_plots  # matplotlib: only where plots are drawn

    recs, recs_sha = read_recommendations(run_dir)
    events = [e for e in read_events(run_dir) if isinstance(e, RequestEvent)]
    _fresh_plots_dir(run_dir)
    plots = write_plots(run_dir, results, recs, events)
    csv_path = write_csv(run_dir, results)
    resumes = read_manifest(run_dir).resumes
    blocks = evidence_blocks(results, recs, recs_sha, plots, raw_hashes(run_dir), resumes)
    write_text_atomic(run_dir / EVIDENCE_FILE, render_markdown(blocks), run_dir=run_dir)
    write_text_atomic(run_dir / HTML_FILE, render_html(blocks, run_dir, f"satbench run {results.run_id}"),
                      run_dir=run_dir)
    digest = write_sums(run_dir)
    return ReportFiles(evidence=str(run_dir / EVIDENCE_FILE), html=str(run_dir / HTML_FILE),
                       csv=str(csv_path), plots=plots, bundle_digest=digest)
