"""How figures are printed in the terminal, EVIDENCE.md and report.html: asymmetric CIs, p95 CIs,
fairness figures next to their bounds, the knee cell, narrow consoles; EVIDENCE.md's commands
and the bundle digest independent of how the run directory was typed; compare's notes and cells."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from satbench.analysis.intervals import statistic
from satbench.analysis.verdicts import Verdict
from satbench.cli.main import main
from satbench.gguf.resolve import resolve_model, resolve_synthetic
from satbench.metrics.interference import Ratio
from satbench.metrics.level_result import Occupancy
from satbench.metrics.stats import Estimate, distribution
from satbench.report.compare import MetricComparison, compare_results, ratio_cell
from satbench.report.document import render_markdown
from satbench.report.evidence_findings import lane_section
from satbench.report.plots import _occupancy
from satbench.report.table import (
    _est,
    level_row,
    print_results,
    recommendation_row,
    verdict_row,
)
from satbench.saturation.recommendations_file import RecommendationsFile
from tests.builders import replaced
from tests.report.test_compare import lane as make_lane
from tests.report.test_compare import level as make_level
from tests.report.test_compare import results as make_results


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A small sweep of the fake server into a directory whose path holds a space."""
    from tests.conftest import FakeProcess

    tmp = tmp_path_factory.mktemp("rendering")
    fake = FakeProcess(tmp, {"n_slots": 2, "prefill_ms_per_token": 0.2, "decode_iteration_ms": 4.0})
    out = tmp / "sp ace" / "run"
    out.parent.mkdir()
    try:
        assert main(["sweep", "--url", fake.base_url, "--concurrency", "1,2", "--requests-per-level", "8",
                     "--repetitions", "2", "--prompt-tokens", "16", "--output-tokens", "4",
                     "-o", str(out)]) == 0
    finally:
        fake.stop()
    return out


def _clipped_level(n: int = 2):
    """A level whose throughput CIs are clipped at 0 (t-interval wider than the mean)."""
    return replaced(make_level(n), {
        "throughput.output_tok_per_s": Estimate(value=1962.5, ci_low=0.0, ci_high=14053.8, n=2),
        "throughput.req_per_s": Estimate(value=226.17, ci_low=0.0, ci_high=1601.42, n=2),
        # n = 98 < 100: p95 gets a CI note
        "latency.itl_ms": distribution([0.3 + 0.01 * i for i in range(98)])})


# ------------------------------------------------------------------ 1: an asymmetric CI is not "±"

def test_a_ci_clipped_at_zero_prints_as_its_interval_and_a_symmetric_one_as_plus_minus():
    assert _est(Estimate(value=1899.8, ci_low=0.0, ci_high=8306.9, n=2)) == "1899.8 [0.0–8306.9]"
    assert _est(Estimate(value=100.0, ci_low=90.0, ci_high=110.0, n=3)) == "100.0 ±10.0"
    assert _est(Estimate(value=100.0, n=1)) == "100.0"
    row = level_row(_clipped_level())
    assert row[1] == "1962.5 [0.0–14053.8]" and row[2] == "226.17 [0.00–1601.42]"
    assert "±" not in row[1] + row[2]


# ------------------------------------------------------- 2+3: commands that work when pasted, one digest

def test_evidence_commands_run_inside_the_run_directory_and_name_no_typed_path(run_dir):
    text = (run_dir / "EVIDENCE.md").read_text()
    assert text.count("sp ace") == 1 and f"-o '{run_dir}'" in text  # only in the recorded argv, quoted
    assert "satbench verify .        # or: sha256sum -c SHA256SUMS" in text
    assert "`satbench capability --recommendations recommendations.json" in text
    block = re.search(r"To regenerate.*?```\n(.*?)```", text, re.DOTALL)[1]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    pasted = subprocess.run(["bash", "-e", "-c", block], cwd=run_dir, env=env, capture_output=True, text=True,
                            check=False)
    assert pasted.returncode == 0, pasted.stderr[-2000:]
    sums = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=run_dir, capture_output=True, text=True,
                          check=False)
    assert sums.returncode == 0, sums.stdout[-2000:]


def test_the_bundle_digest_does_not_depend_on_how_the_run_directory_was_typed(run_dir, monkeypatch, capsys):
    digests = []
    for cwd, spelling in ((run_dir.parent.parent, "sp ace/run"), (Path("/"), str(run_dir)),
                          (run_dir, "."), (run_dir, f"../{run_dir.name}/")):
        monkeypatch.chdir(cwd)
        capsys.readouterr()
        assert main(["report", spelling]) == 0
        digests.append(capsys.readouterr().out.split("SHA256SUMS) ")[1].strip())
    assert len(set(digests)) == 1, digests


def test_a_relative_model_path_is_recorded_absolute(tmp_path, monkeypatch):
    made = resolve_synthetic("synthetic:llama-tiny", tmp_path)
    monkeypatch.chdir(tmp_path)
    path, info = resolve_model(made.name, tmp_path / "unused")
    assert path == made and Path(info.path).is_absolute() and info.path == str(made)


# --------------------------------------------------------------- 4: every starred p95 gets its CI

def test_an_itl_p95_from_few_samples_has_its_ci_in_the_terminal_and_the_evidence():
    lane = make_lane(levels=()).model_copy(update={"levels": [_clipped_level()]})
    console = Console(width=132, file=io.StringIO(), record=True)
    print_results(make_results(lane), console)
    assert "N=2: ITL p95 1.2 ms from n=98, 95% CI [" in console.export_text()
    notes = render_markdown(lane_section(lane, []))
    assert "N=2 ITL p95 1.2 ms from n=98, 95% CI [" in notes


def test_the_recommendations_row_prints_p95_ttft_and_tpot_with_their_ci(run_dir):
    recs = RecommendationsFile.model_validate_json((run_dir / "recommendations.json").read_text())
    r = recs.lanes[0]
    cell = recommendation_row(r)[7]
    ttft, tpot = r.expected.p95_ttft_ci, r.expected.p95_tpot_ci
    hi = "unbounded" if ttft.high is None else f"{ttft.high:.0f}"
    assert cell.startswith(f"{r.expected.p95_ttft_ms:.0f} [{ttft.low:.0f}–{hi}] / "), cell
    assert f"{r.expected.p95_tpot_ms:.1f} [{tpot.low:.1f}–" in cell


# ---------------------------------------------------- 5: a failing fairness figure never reads as a pass

@pytest.mark.parametrize("value, low, high, bound, shown", [
    (1.1049, 1.101, 1.12, 1.1, "service_ratio 1.105 [1.101, 1.12] ≤ 1.1"),
    (1000.4, 1000.2, None, 1000.0, "service_ratio 1000.4 [1000.2, ∞] ≤ 1000"),
    (0.99, None, 0.995, 0.99, "service_ratio 0.99 [−∞, 0.995] ≤ 0.99"),
])
def test_fairness_figures_print_enough_digits_to_differ_from_their_bound(value, low, high, bound, shown):
    s = statistic("service_ratio", value, (low, high), bound, level=0.975, method="t", n=3)
    v = Verdict(check="F1", name="equal requests", verdict=s.decision, statistics=[s], rounds=1, rounds_max=2)
    row = verdict_row(v)
    assert row[2] == shown
    assert row[3] == "1 of ≤ 2 (CI 97.5 %)"


# ------------------------------------------------------------------ 7: the knee cell follows its reason

def test_the_knee_cell_says_still_rising_only_when_throughput_still_rises(run_dir):
    r = RecommendationsFile.model_validate_json((run_dir / "recommendations.json").read_text()).lanes[0]
    single = r.model_copy(update={"knee": None, "knee_reason": "a single level: no knee can be seen",
                                  "recommended_range": None})
    assert recommendation_row(single)[3] == "none (a single level: no knee can be seen)"
    still_gains = "throughput still gains ≥ 10% per doubling up to the highest level N=8"
    rising = r.model_copy(update={"knee": None, "knee_reason": still_gains, "recommended_range": None})
    assert recommendation_row(rising)[3] == "none (still rising)"
    ranged = rising.model_copy(update={"recommended_range": (2, 8)})
    assert recommendation_row(ranged)[3] == "undetermined"
    assert recommendation_row(r.model_copy(update={"knee": 2}))[3] == "2"


# ------------------------------------------------------------- 6: narrow consoles cut no figure, lose no N

@pytest.mark.parametrize("width", [132, 80, 60])
def test_the_level_table_keeps_every_figure_and_n_whole_on_a_narrow_console(width):
    lane = make_lane(levels=()).model_copy(update={"levels": [_clipped_level(n) for n in (1, 2, 16)]})
    console = Console(width=width, file=io.StringIO(), record=True)
    print_results(make_results(lane), console)
    text = console.export_text()
    assert "…" not in text
    for lv in lane.levels:
        row = level_row(lv)
        lines = [line for line in text.splitlines() if re.match(rf"│ +{lv.concurrency} │", line)]
        assert lines, f"N={lv.concurrency} lost"
        for cell in row[1:]:
            assert any(f" {cell} │" in line for line in lines), (cell, lines)
    for header in ("N", "out tok/s", "TTFT p50/p95", "slots t/d/c", "RSS MiB", "flags"):
        assert f" {header} ┃" in text, header


# ------------------------------------------------------------------------------------ 8, 9: compare

def test_compare_notes_a_different_slot_count_and_context():
    a = replaced(make_lane(), {"runtime.total_slots": 4, "runtime.per_slot_ctx": 4096})
    b = replaced(make_lane(), {"runtime.total_slots": 8, "runtime.per_slot_ctx": 2048})
    notes = compare_results(make_results(a), make_results(b, run_id="run-b"), "A", "B").lanes[0].notes
    assert "slots 4 in A, 8 in B (as the servers reported them)" in notes
    assert "per-slot context 4096 in A, 2048 in B (as the servers reported them)" in notes
    same = compare_results(make_results(make_lane()), make_results(make_lane(), run_id="b"), "A", "B")
    assert not any("slots" in n for n in same.lanes[0].notes)


def test_a_ci_end_that_is_not_1_never_prints_as_1_00():
    m = MetricComparison(metric="output_tok_per_s", a=1.0, b=2.0,
                         ratio=Ratio(value=2.0, ci_low=1.004, ci_high=3.0), significant=True,
                         direction="better")
    assert ratio_cell(m).plain == "×2.00 [1.004–3.00] ▲"
    m.ratio = Ratio(value=0.5, ci_low=0.2, ci_high=0.9996)
    assert "[0.20–0.9996]" in ratio_cell(m).plain


def test_compare_on_a_missing_directory_fails_like_report(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nope")]) == 5
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "nope"), str(tmp_path / "nope2")]) == 5
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nope is not a directory" in err


def test_the_occupancy_plot_leaves_out_a_zero_on_its_log_scale():
    lane = make_lane(levels=(1, 2, 4))
    lane = lane.model_copy(update={"levels": [
        lv.model_copy(update={"occupancy": Occupancy(slots=4, time_weighted_busy_slots=busy,
                                                     client_in_flight=float(lv.concurrency))})
        for lv, busy in zip(lane.levels, (0.0, 1.5, 3.0))]})
    fig, _, _ = _occupancy(lane)
    line = next(ln for ln in fig.axes[0].lines if ln.get_label() == "busy slots, time-weighted")
    assert list(line.get_ydata()) == [1.5, 3.0] and list(line.get_xdata()) == [2, 4]


def test_the_missing_sums_hint_quotes_a_path_with_a_space(tmp_path):
    import pytest

    from satbench.errors import RunDirError
    from satbench.report.integrity import read_sums
    run = tmp_path / "sp ace"
    run.mkdir()
    with pytest.raises(RunDirError, match=r"satbench report '.*sp ace'`"):
        read_sums(run)
