"""results.csv: one row per lane × scenario × level, for spreadsheets.

Every figure is the one in results.json (same units, named in the header); an empty cell is a
figure that is unavailable (results.json says why), never a zero.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from pathlib import Path

from satbench.analysis.results import LaneResult, ResultsFile
from satbench.metrics.level_result import LevelResult
from satbench.metrics.specs import Part, csv_columns, figure, part_of
from satbench.records.layout import CSV_FILE
from satbench.records.manifest import write_text_atomic


def _level_cell(path: str, part: Part) -> Callable[[LevelResult], object]:
    return lambda lv: part_of(figure(lv, path), part)


# (header, value of one level), from the figures' specs (metrics/specs.py); the lane-level columns
# come first, see _lane_cells
LEVEL_COLUMNS: list[tuple[str, Callable[[LevelResult], object]]] = [
    (header, _level_cell(spec.path, part)) for header, spec, part in csv_columns()]
LANE_COLUMNS = ["run_id", "lane", "scenario", "model", "model_sha256", "synthetic_weights", "runtime",
                "llamacpp_build", "backend", "hardware_fingerprint", "prompt_tokens", "output_tokens"]


def _lane_cells(results: ResultsFile, lane: LaneResult, scenario: str) -> list[object]:
    return [results.run_id, lane.lane, scenario, lane.model.path or lane.runtime.model_alias,
            lane.model.sha256, lane.model.synthetic, lane.runtime.kind, lane.runtime.build_number,
            lane.runtime.backend, lane.hardware.fingerprint_sha256, lane.workload.prompt_tokens,
            lane.workload.output_tokens]


def _cell(v: object) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(round(v, 6))
    return str(v)


def render_csv(results: ResultsFile) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(LANE_COLUMNS + [name for name, _ in LEVEL_COLUMNS])
    for lane in results.lanes:
        for scenario, levels in (("solo", lane.levels), ("together", lane.together_levels)):
            for lv in levels:
                w.writerow([_cell(v) for v in _lane_cells(results, lane, scenario)]
                           + [_cell(get(lv)) for _, get in LEVEL_COLUMNS])
    return buf.getvalue()


def write_csv(run_dir: Path, results: ResultsFile) -> Path:
    path = run_dir / CSV_FILE
    write_text_atomic(path, render_csv(results), run_dir=run_dir)
    return path
