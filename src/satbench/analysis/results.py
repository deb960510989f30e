"""results.json: the versioned, schema-validated product of `analyze` (docs/run-directory.md)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import Field, ValidationError

from satbench.analysis.verdicts import Verdict
from satbench.config.ranges import RECORDED
from satbench.config.schema import RunConfig, ServerParams, SloConfig, WorkloadConfig
from satbench.errors import RunDirError
from satbench.metrics.flags import flag_definitions
from satbench.metrics.interference import Interference
from satbench.metrics.level_result import LevelResult
from satbench.metrics.open_loop import RateResult
from satbench.metrics.slot_memory import MARGIN_TEXT, LaneMemory
from satbench.metrics.specs import definitions
from satbench.records.artifacts import published_schema, render, validate_text, write_artifact
from satbench.records.layout import RESULTS_FILE, VERDICTS_FILE
from satbench.records.manifest import (
    HostInfo,
    ModelInfo,
    NetworkInfo,
    PlanDecision,
    Provenance,
    RuntimeInfo,
    ServerFailure,
    first_error,
)
from satbench.records.record import Record
from satbench.records.rundir import read_regular_file
from satbench.server.memlog import LOG_VERBOSITY

MAX_RESULTS_BYTES = 64 << 20  # figures per level and lane, no raw records: far below this
RESULTS_SCHEMA_VERSION = "3.9"  # what each version added: docs/schemas.md

DEFINITIONS = {
    **definitions(),  # the figures of a level (metrics/specs.py)
    **flag_definitions(),  # what some flags mean (metrics/flags.py)
    "steady_window": "from the moment every stream has a token of a measured request to the first "
                     "completion after the last request was issued",
    "latency_sample": "successful measured requests completing inside the steady window, pooled over "
                      "repetitions",
    "percentiles": "linear interpolation; 95% CI from binomial order statistics of the pooled sample, "
                   "widened to contain the estimate (within-run sampling only: it does not carry "
                   "repetition-to-repetition variation); mean CI Student-t over repetitions",
    "repetition_p95": "repetitions[].p95_ttft_ms / p95_itl_ms / p95_e2e_ms: the p95 of that repetition's "
                      "own latency sample; compare and interference take a p95's CI as Student-t over these "
                      "(none from fewer than 2), widened to contain the pooled p95",
    "together_levels": "the lane measured while every lane of the run ran at once, levels in lockstep by "
                       "position; lanes that finished early kept their streams busy with background "
                       "requests (never counted); only the first levels and repetitions that every lane has "
                       "(the rest ran alone only)",
    "interference": "together / alone for output tok/s and p95 TTFT and ITL; CI by interval arithmetic on "
                    "the two 95% CIs (for a p95, the CI over repetitions of repetition_p95)",
    "hardware.fingerprint_sha256": "sha256 of canonical JSON of CPU model and signature, cores (logical, "
                                   "physical, usable), RAM class (multiple of 4 GiB at or above it), OS "
                                   "family (not the kernel release), and each GPU's name, memory (GiB), "
                                   "driver and CUDA version",
    "gpu": "NVML, device-wide: utilisation and SM clock of the busiest GPU and memory used (all GPUs), mean "
           "over the readings inside the steady windows; peak memory over the whole level",
    "fairness_evidence": "a verdict needs its situation: F2 rounds whose N requests were in flight at once; "
                         "F3 more requests than slots in flight for >= 80% of each round's window; S3 pairs "
                         "whose second prompt came before the first's first token; no client TTFT more than "
                         "1 ms below the server's prompt_ms (a late send stamp); solo references within 1.5x "
                         "of each other; F1 every pair of streams compared",
    "fairness_decision": "each statistic's CI at level 1 - 0.05 / L, L the looks its check's rounds allow "
                         "(after the base rounds and after each top-up: Bonferroni); pass when the CI's "
                         "upper end <= bound, fail when its lower end > bound, else marginal; a check fails"
                         " when any statistic fails, passes when all pass; the runner adds a round while it"
                         " is marginal, up to the cap",
    "f1_service_ratio": "per pair of streams (i, j): r = (sum of i's tokens + 1) / (sum of j's + 1) over "
                        "the intervals they decoded side by side (>= 250 ms after trimming 50 ms at each "
                        "end, >= 20 tokens); max over pairs of max(r, 1/r); CI: percentile bootstrap of 250"
                        " ms blocks within each pair",
    "f1_ttft": "the f1_ttft_quantile quantile of the TTFTs of every F1 request, CI from order statistics, "
               "against sum(prompt) / prefill rate + f1_ttft_iterations iterations + RTT jitter",
    "f2_slowdown": "per round: max over sizes of E2E together / median E2E alone; mean over rounds with a "
                   "Student-t CI",
    "f3_gap": "after each completion in a round's window: max - min over clients of the weighted service "
              "(prompt + 2 output tokens), in costliest requests; its f3_gap_quantile quantile and its OLS "
              "drift per client cycle within rounds; CIs: moving-block bootstrap (blocks of one cycle)",
    "s1_stall": "per injection: the decoders' max ITL during its prefill, and its prefill / the solo "
                "prefill; means over injections with Student-t CIs",
    "s2_delay": "probe TTFT - solo TTFT for probes sent while every decoder of their round was mid-stream; "
                "median with a percentile-bootstrap CI",
    "s3_wait": "per pair: second's TTFT - first's TTFT - solo prefill; mean over pairs with a Student-t CI",
    "memory": f"lanes[].memory: cache = KV + state buffers llama.cpp printed at start (a probe start "
              f"at log verbosity {LOG_VERBOSITY}), per slot = cache / n_seq_max; slots_fit = slots + min "
              f"over the pools holding cache of floor((memory left - {MARGIN_TEXT}) / its cache per slot), "
              "the memory left being the lower of the readings at start and after the levels of GPU free "
              "memory, or of RAM available less the mapped model (not on tmpfs); null with --kv-unified or "
              "several GPUs",
    "littles_law": "N vs the mean over repetitions of reported req/s * mean E2E of the successful requests "
                   "completing in the window; flagged beyond 5% (client lag between requests, failed "
                   "requests, or a rate that does not describe the server)",
}


class LaneResult(Record):
    """Everything about one lane, keyed by lane and (through `hardware`) by machine."""

    lane: str
    model: ModelInfo
    runtime: RuntimeInfo
    network: NetworkInfo
    hardware: HostInfo = Field(description="recorded once per run, attached to every lane")
    workload: WorkloadConfig
    server_params: ServerParams
    slo: SloConfig | None = None
    memory: LaneMemory | None = Field(None, description="the lane's cache per slot and the slots that fit, "
                                      "from its server's buffers (null: none printed, or a running server)")
    levels: list[LevelResult] = Field(description="the lane alone on the machine")
    together_levels: list[LevelResult] = Field(default_factory=list,
                                               description="the lane while every lane of the run ran")
    interference: list[Interference] = Field(default_factory=list)
    fairness: list[Verdict] = Field(default_factory=list, description="F1-F3, S1-S3; empty when not run")
    server_failures: list[ServerFailure] = Field(
        default_factory=list, description="levels whose server crashed or stopped answering (from run.json)")
    plan: list[PlanDecision] = Field(default_factory=list, description="the adaptive sweep's decisions, in "
                                     "order (from run.json); empty for fixed levels")
    rates: list[RateResult] = Field(default_factory=list, description="the open-loop rates (--rate), lowest "
                                    "first; empty when none ran")


class ResultsFile(Record):
    schema_version: str = RESULTS_SCHEMA_VERSION
    run_id: str
    status: str
    status_reason: str | None = None
    started_at: str
    finished_at: str | None = None
    command_line: list[str]
    config: RunConfig
    provenance: Provenance
    definitions: dict[str, str] = Field(default_factory=lambda: dict(DEFINITIONS))
    lanes: list[LaneResult]
    lanes_not_started: list[ServerFailure] = Field(
        default_factory=list, description="lanes of the run whose server never started (so no section in "
                                          "`lanes`)")


def read_results(run_dir: Path) -> ResultsFile:
    """A run directory's results.json; RunDirError (one line, exit 5) when missing, unreadable or invalid."""
    run_dir = Path(run_dir)
    path = run_dir / RESULTS_FILE
    redo = f"run `satbench analyze {run_dir}` first"
    try:
        if not run_dir.is_dir():
            raise RunDirError(f"{run_dir}: no such run directory")
        if not os.path.lexists(path):
            raise RunDirError(f"{run_dir}: no {RESULTS_FILE}; {redo}")
    except OSError as exc:
        raise RunDirError(f"{run_dir}: {exc.strerror or exc}") from exc
    try:
        data = json.loads(read_regular_file(path, MAX_RESULTS_BYTES).decode("utf-8"))
    except RunDirError as exc:
        raise RunDirError(f"{exc}; {redo}") from exc
    except (ValueError, RecursionError) as exc:
        raise RunDirError(f"{path}: cannot read it ({exc.__class__.__name__}); {redo}") from exc
    version = data.get("schema_version") if isinstance(data, dict) else None
    if not isinstance(version, str) or version.split(".")[0] != RESULTS_SCHEMA_VERSION.split(".")[0]:
        raise RunDirError(f"{path}: results schema {version} is not {RESULTS_SCHEMA_VERSION}; {redo}")
    try:
        return ResultsFile.model_validate(data, context=RECORDED)  # its config as recorded (config.RECORDED)
    except RecursionError as exc:
        raise RunDirError(f"{path}: not a valid {RESULTS_FILE} (nested too deep); {redo}") from exc
    except ValidationError as exc:
        raise RunDirError(f"{path}: not a valid {RESULTS_FILE} ({first_error(exc)}); {redo}") from exc


def results_json_schema() -> dict:
    """The published JSON Schema of results.json (`satbench schema results`)."""
    return published_schema(ResultsFile, "results", RESULTS_SCHEMA_VERSION)


def render_results(results: ResultsFile) -> str:
    """Deterministic text of results.json (same input → same bytes)."""
    return render(results)


def validate_results_text(text: str) -> None:
    """Check results.json text against the published schema; RunDirError if it does not hold."""
    validate_text(text, results_json_schema(), RESULTS_FILE)


def write_results(run_dir: Path, results: ResultsFile) -> Path:
    return write_artifact(run_dir / RESULTS_FILE, results, results_json_schema())


VERDICTS_SCHEMA_VERSION = "2.0"  # what each version added: docs/schemas.md


class LaneVerdicts(Record):
    lane: str
    model_sha256: str | None
    hardware_fingerprint: str
    runtime_build: int | None
    verdicts: list[Verdict]


class VerdictsFile(Record):
    """verdicts.json: the fairness and starvation verdicts of every lane of a run."""

    schema_version: str = VERDICTS_SCHEMA_VERSION
    run_id: str
    lanes: list[LaneVerdicts]

    @property
    def any_failed(self) -> bool:
        return any(v.verdict == "fail" for lane in self.lanes for v in lane.verdicts)


def verdicts_of(results: ResultsFile) -> VerdictsFile | None:
    lanes = [LaneVerdicts(lane=lane.lane, model_sha256=lane.model.sha256,
                          hardware_fingerprint=lane.hardware.fingerprint_sha256,
                          runtime_build=lane.runtime.build_number, verdicts=lane.fairness)
             for lane in results.lanes if lane.fairness]
    return VerdictsFile(run_id=results.run_id, lanes=lanes) if lanes else None


def render_verdicts(verdicts: VerdictsFile) -> str:
    """Deterministic text of verdicts.json."""
    return render(verdicts)


def verdicts_json_schema() -> dict:
    """The published JSON Schema of verdicts.json (`satbench schema verdicts`)."""
    return published_schema(VerdictsFile, "verdicts", VERDICTS_SCHEMA_VERSION)


def write_verdicts(run_dir: Path, verdicts: VerdictsFile) -> Path:
    return write_artifact(run_dir / VERDICTS_FILE, verdicts, verdicts_json_schema())
