"""The commands that measure nothing: they read a run directory (analyze, recommend, report, verify,
compare), a lane file and recommendations (capability), or write a schema or a synthetic model. Each
takes the parsed arguments and returns the exit code; a user error is a SatbenchError (cli.main).
cli.output (its models import the fleet, capability and HTTP modules) is imported only under --json."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from satbench.cli.args import lanes_config
from satbench.cli.exits import OK, VERIFY_FAILED
from satbench.records.rundir import refuse_if_in_use


def cmd_analyze(a: argparse.Namespace) -> int:
    from satbench import api
    from satbench.report.table import print_results

    results = api.analyze(a.run_dir)
    print_results(results, run_dir=Path(a.run_dir))
    note_stale_report(Path(a.run_dir), ["results.json", "verdicts.json"])
    if a.json:
        from satbench.cli.output import AnalyzeOutput, emit

        emit(a, AnalyzeOutput(run_dir=a.run_dir, results=results))
    return OK


def note_stale_report(run_dir: Path, rewritten: list[str]) -> None:
    from satbench.pipeline import SweepDerivation

    if (note := SweepDerivation().stale_note(run_dir, rewritten)) is not None:
        print(note, file=sys.stderr)


def cmd_schema(a: argparse.Namespace) -> int:
    """A file's schema (FILE_SCHEMAS), or output-COMMAND: the schema of COMMAND --json's document."""
    from satbench.cli.output import FILE_SCHEMAS, OUTPUT_SCHEMAS, emit

    schema = (FILE_SCHEMAS | OUTPUT_SCHEMAS)[a.name]()
    print(json.dumps(schema, indent=2, sort_keys=True))

    emit(a, schema)
    return OK


def show_recommendations(recs, path: Path) -> None:
    """The recommendations' table and the file's path, on stdout (cli.main silences it under --quiet
    and --json)."""
    from satbench.report.table import print_recommendations

    print_recommendations(recs)
    print(f"recommendations: {path}")


def cmd_capability(a: argparse.Namespace) -> int:
    from satbench import api
    from satbench.capability.report import render_json, render_litellm

    report = api.capability(lanes_config(a), a.recommendations, max_age_days=a.max_age_days,
                            accept_contended=a.accept_contended, node_id=a.node_id, api_base=a.api_base or [],
                            accept_workload=a.accept_workload)
    text = render_json(report) if a.format == "json" else render_litellm(report)
    if a.output:
        from satbench.records.manifest import write_text_atomic

        write_text_atomic(Path(a.output), text, output_flag="-o")
    else:
        sys.stdout.write(text)
    for lane in report.lanes:
        if lane.status == "unmeasured":
            print(f"satbench: lane {lane.lane} is unmeasured here: {lane.reason}", file=sys.stderr)
    from satbench.cli.output import emit

    emit(a, render_json(report))
    return OK


def show_report(files) -> None:
    print(f"report: {files.evidence}, {files.html} ({len(files.plots)} plots), {files.csv}; "
          f"bundle digest (sha256 of SHA256SUMS) {files.bundle_digest}")


def cmd_report(a: argparse.Namespace) -> int:
    from satbench.pipeline import report

    refuse_if_in_use(Path(a.run_dir))
    files = report(Path(a.run_dir))
    show_report(files)
    if a.json:
        from satbench.cli.output import ReportOutput, emit

        emit(a, ReportOutput(run_dir=a.run_dir, report=files))
    return OK


def cmd_verify(a: argparse.Namespace) -> int:
    from satbench.pipeline import verify

    v = verify(Path(a.run_dir))
    for label, items in (("MODIFIED", v.modified), ("MISSING", v.missing), ("INCONSISTENT", v.inconsistent),
                         ("NOT COVERED by SHA256SUMS", v.uncovered),
                         ("not listed (added after the report)", v.unlisted)):
        for item in items:
            print(f"{label}: {item}")
    if v.rounding:
        print("equal to a fresh derivation within floating-point rounding (derived by another Python, "
              f"numpy or scipy): {', '.join(v.rounding)}")
    if v.older_schema:
        print("written by an earlier satbench, consistent under the current schemas: "
              f"{', '.join(v.older_schema)}")
    verdict = "OK" if v.ok else "FAILED"
    print(f"verify {verdict}: {v.files_checked} files in SHA256SUMS, {len(v.modified)} modified, "
          f"{len(v.missing)} missing, {len(v.inconsistent)} derived files inconsistent with the raw ones, "
          f"{len(v.uncovered)} not covered; "
          f"bundle digest {v.bundle_digest}")
    code = OK if v.ok else VERIFY_FAILED
    if a.json:
        from satbench.cli.output import VerifyOutput, emit

        emit(a, VerifyOutput(exit_code=code, verification=v))
    return code


def cmd_compare(a: argparse.Namespace) -> int:
    from satbench.report.compare import compare_runs, print_comparison

    comparison = compare_runs(Path(a.run_a), Path(a.run_b))
    print_comparison(comparison)
    if a.json:
        from satbench.cli.output import CompareOutput, emit

        emit(a, CompareOutput(run_a=a.run_a, run_b=a.run_b, comparison=comparison))
    return OK


def cmd_recommend(a: argparse.Namespace) -> int:
    from satbench import api
    from satbench.records.layout import RECOMMENDATIONS_FILE

    recs = api.recommend(a.run_dir)
    path = Path(a.run_dir) / RECOMMENDATIONS_FILE
    show_recommendations(recs, path)
    note_stale_report(Path(a.run_dir), ["recommendations.json"])
    if a.json:
        from satbench.cli.output import emit

        emit(a, path.read_text())  # the file as written: its schema is `satbench schema recommendations`
    return OK


def cmd_models(a: argparse.Namespace) -> int:
    from satbench.gguf.shapes import parse_overrides, spec_for
    from satbench.gguf.synthetic import write_synthetic_gguf
    from satbench.gguf.synthetic_meta import output_path, refuse_to_replace

    overrides = parse_overrides(a.dim)
    spec_for(a.arch, a.size, a.vocab, overrides)  # a refused shape says so before the output is looked at
    output_path(a.output)
    if not a.force:
        refuse_to_replace(a.output)
    info = write_synthetic_gguf(a.output, arch=a.arch, size=a.size, seed=a.seed, n_vocab=a.vocab,
                                overrides=overrides)
    dims = f", dimensions {info.dims}" if info.dims else ""
    print(f"wrote {info.path}: SYNTHETIC random weights, {info.arch} {info.size}{dims}, "
          f"vocab {info.n_vocab:,}, seed {info.seed}, {info.n_params:,} parameters, "
          f"{info.file_bytes:,} bytes, sha256 {info.sha256}")
    from satbench.cli.output import ModelsMakeOutput, emit

    emit(a, ModelsMakeOutput(model=info))
    return OK
