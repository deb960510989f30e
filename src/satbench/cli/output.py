"""What `--json` prints: one JSON document on stdout per command, its schema published as
`satbench schema output-COMMAND`. recommend, capability and fleet merge print the document they
write (schemas recommendations, capability, fleet); schema prints the JSON Schema asked for; the
others print one of the models below (pydantic, extra="forbid"). A command that fails with an error
prints nothing on stdout (the error is its one line on stderr, the exit code says which)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, Field

from satbench.analysis.results import ResultsFile
from satbench.config.schema import Strict
from satbench.fleet.record import FleetRecord
from satbench.gguf.synthetic_meta import SyntheticModelInfo
from satbench.records.artifacts import published_schema
from satbench.report.bundle import ReportFiles
from satbench.report.compare import Comparison
from satbench.report.integrity import Verification
from satbench.saturation.recommendations_file import RecommendationsFile

OUTPUT_SCHEMA_VERSION = "1.0"


class SweepOutput(Strict):
    """`satbench sweep --json` and `satbench fairness --json`: the run as its directory holds it at
    the end (results.json and recommendations.json, when written)."""

    command: Literal["sweep", "fairness"]
    run_dir: str
    status: str = Field(description="run.json's status: complete, interrupted, failed, running")
    exit_code: int = Field(description="the exit status the command returns (satbench --help lists them)")
    server_failures: list[str] = Field(default_factory=list, description="each failure's reason, one line")
    results: ResultsFile | None = None
    recommendations: RecommendationsFile | None = None


class AnalyzeOutput(Strict):
    run_dir: str
    results: ResultsFile


class ReportOutput(Strict):
    run_dir: str
    report: ReportFiles


class VerifyOutput(Strict):
    exit_code: int = Field(description="0: verified; 7: it fails")
    verification: Verification


class CompareOutput(Strict):
    run_a: str
    run_b: str
    comparison: Comparison


class ModelsMakeOutput(Strict):
    model: SyntheticModelInfo


class FleetRunOutput(Strict):
    fleet_dir: str
    exit_code: int = Field(description="0: every node merged; 9: some node is not")
    record: FleetRecord


def _schema_output() -> dict:
    """What `satbench schema NAME --json` prints: a JSON Schema, draft 2020-12."""
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"https://satbench.dev/schema/output-schema/{OUTPUT_SCHEMA_VERSION}.json",
            "title": f"satbench output-schema {OUTPUT_SCHEMA_VERSION}", "type": "object",
            "required": ["$schema", "$id", "title"],
            "properties": {"$schema": {"type": "string"}, "$id": {"type": "string"},
                           "title": {"type": "string"}}}


def _model_schema(model: type[BaseModel], name: str) -> Callable[[], dict]:
    return lambda: published_schema(model, f"output-{name}", OUTPUT_SCHEMA_VERSION)


def _results_schema() -> dict:
    from satbench.analysis.results import results_json_schema

    return results_json_schema()


def _verdicts_schema() -> dict:
    from satbench.analysis.results import verdicts_json_schema

    return verdicts_json_schema()


def _recommendations_schema() -> dict:
    from satbench.saturation.recommendations_file import recommendations_json_schema

    return recommendations_json_schema()


def _capability_schema() -> dict:
    from satbench.capability.report import capability_json_schema

    return capability_json_schema()


def _fleet_schema() -> dict:
    from satbench.fleet.export import fleet_json_schema

    return fleet_json_schema()


# the files' published schemas, by the name `satbench schema` takes
FILE_SCHEMAS = {"results": _results_schema, "verdicts": _verdicts_schema,
                "recommendations": _recommendations_schema, "capability": _capability_schema,
                "fleet": _fleet_schema}


def _file_schema(name: str) -> Callable[[], dict]:
    return lambda: FILE_SCHEMAS[name]()


OUTPUT_SCHEMAS: dict[str, Callable[[], dict]] = {
    "output-sweep": _model_schema(SweepOutput, "sweep"),
    "output-fairness": _model_schema(SweepOutput, "fairness"),
    "output-analyze": _model_schema(AnalyzeOutput, "analyze"),
    "output-recommend": _file_schema("recommendations"),
    "output-capability": _file_schema("capability"),
    "output-report": _model_schema(ReportOutput, "report"),
    "output-verify": _model_schema(VerifyOutput, "verify"),
    "output-compare": _model_schema(CompareOutput, "compare"),
    "output-schema": _schema_output,
    "output-models-make": _model_schema(ModelsMakeOutput, "models-make"),
    "output-fleet-run": _model_schema(FleetRunOutput, "fleet-run"),
    "output-fleet-merge": _file_schema("fleet"),
}


def emit(a: argparse.Namespace, doc: BaseModel | dict | str) -> None:
    """With --json, print the command's JSON document on `a.stdout` (the stdout cli.main kept while
    it sends the human output elsewhere): a model or dict with sorted keys, a str (a file's text) as
    is. Without --json, nothing."""
    if not getattr(a, "json", False):
        return
    if isinstance(doc, BaseModel):
        text = json.dumps(doc.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"
    elif isinstance(doc, dict):
        text = json.dumps(doc, indent=2, sort_keys=True) + "\n"
    else:
        text = doc if doc.endswith("\n") else doc + "\n"
    out = getattr(a, "stdout", None) or sys.stdout
    out.write(text)
    out.flush()
