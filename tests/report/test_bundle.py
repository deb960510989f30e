"""The evidence bundle of a whole sweep (fake llama.cpp server, through the CLI): EVIDENCE.md,
report.html in a real headless Chromium, results.csv, SHA256SUMS and `satbench verify`."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import shutil
from pathlib import Path

import pytest

from satbench.analysis.results import ResultsFile
from satbench.cli.main import main
from satbench.pipeline import verify
from satbench.report.integrity import DERIVED_FILES, SUMS_FILE, read_sums
from tests.report.chromium import find_chromium, open_page

KEY = "sk-test-7f3c9a1b2d4e6f80"
PASSWORD = "hunter2-pw-91ab"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    from tests.conftest import FakeProcess

    tmp = tmp_path_factory.mktemp("bundle")
    fake = FakeProcess(tmp, dict(n_slots=2, prefill_ms_per_token=0.2, decode_iteration_ms=4.0))
    url = fake.base_url.replace("http://", f"http://admin:{PASSWORD}@")
    out = tmp / "run"
    mp = pytest.MonkeyPatch()
    mp.setenv("SATBENCH_TEST_KEY", KEY)
    try:
        assert main(["sweep", "--url", url, "--api-key-env", "SATBENCH_TEST_KEY", "--concurrency", "1,2,4",
                     "--requests-per-level", "10", "--repetitions", "2", "--prompt-tokens", "32",
                     "--output-tokens", "8", "-o", str(out)]) == 0
    finally:
        mp.undo()
        fake.stop()
    return out


def test_a_sweep_ends_with_the_whole_bundle(run_dir):
    for name in ("EVIDENCE.md", "report.html", "results.csv", SUMS_FILE, "results.json",
                 "recommendations.json"):
        assert (run_dir / name).stat().st_size > 0, name
    kinds = sorted(p.name for p in (run_dir / "plots").iterdir())
    assert kinds == ["default-latency.png", "default-occupancy.png", "default-throughput.png",
                     "default-timeline.png"]


def test_evidence_names_commands_build_hardware_model_and_every_raw_file(run_dir):
    text = (run_dir / "EVIDENCE.md").read_text()
    results = ResultsFile.model_validate_json((run_dir / "results.json").read_text())
    for section in ("## What was run", "## Machine", "## Lanes: models and runtimes", "## Lane default",
                    "## Recommendations", "## Flags raised", "## Limitations",
                    "## Raw files and their hashes", "## Handoff"):
        assert section in text, section
    assert "satbench sweep --url 'http://***@127.0.0.1:" in text  # the recorded command, credentials gone
    assert results.provenance.host.fingerprint_sha256 in text
    sums = read_sums(run_dir)
    for raw in ("run.json", "events.jsonl", "server_samples.jsonl"):
        assert f"| {raw} |" in text and sums[raw] in text
    # every measured level is a row of the lane's table
    for lv in results.lanes[0].levels:
        assert f"\n| {lv.concurrency} | " in text
    # a 2-slot server at N=4 is queue-bound: the flag travels to the evidence
    assert "default alone N=4: queue_bound: 4 streams but 2 slots" in text
    assert "Queue time is an estimate" in text
    assert "concurrency above 4" in text  # the handoff says what was not measured


def test_no_credential_reaches_any_file(run_dir):
    for path in run_dir.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert KEY.encode() not in data, path
            assert PASSWORD.encode() not in data, path


def test_results_csv_has_one_row_per_lane_and_level(run_dir):
    rows = list(csv.DictReader(io.StringIO((run_dir / "results.csv").read_text())))
    results = ResultsFile.model_validate_json((run_dir / "results.json").read_text())
    assert [int(r["concurrency"]) for r in rows] == [lv.concurrency for lv in results.lanes[0].levels]
    for row, lv in zip(rows, results.lanes[0].levels):
        assert float(row["output_tok_per_s"]) == pytest.approx(lv.throughput.output_tok_per_s.value, rel=1e-6)
        assert float(row["ttft_p95_ms"]) == pytest.approx(lv.latency.ttft_ms.p95, rel=1e-6)
        assert row["lane"] == "default" and row["scenario"] == "solo"
    # a --url server on this machine: its process, found by its listening port, gives its memory
    assert int(rows[0]["peak_rss_bytes"]) == results.lanes[0].levels[0].memory.peak_rss_bytes > 0


def test_verify_passes_then_catches_a_modified_a_missing_and_an_inconsistent_file(run_dir, tmp_path, capsys):
    assert verify(run_dir).ok
    assert main(["verify", str(run_dir)]) == 0
    assert "verify OK" in capsys.readouterr().out
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    events = copy / "events.jsonl"
    lines = events.read_text().splitlines(keepends=True)
    events.write_text("".join(lines[:-3]))  # drop three raw records
    (copy / "results.csv").unlink()
    v = verify(copy)
    assert v.modified == ["events.jsonl"] and v.missing == ["results.csv"]
    assert any(s.startswith("results.json: differs") for s in v.inconsistent)
    assert main(["verify", str(copy)]) == 7
    out = capsys.readouterr().out
    assert "MODIFIED: events.jsonl" in out and "verify FAILED" in out


def test_a_consistently_rehashed_tampering_is_still_caught(run_dir, tmp_path):
    """Editing a figure in results.json and rewriting SHA256SUMS to match: the hashes agree, the
    recomputation from the raw files does not."""
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    res = json.loads((copy / "results.json").read_text())
    res["lanes"][0]["levels"][0]["throughput"]["output_tok_per_s"]["value"] *= 2
    (copy / "results.json").write_text(json.dumps(res, indent=2, sort_keys=True) + "\n")
    from satbench.report.integrity import write_sums

    write_sums(copy)
    v = verify(copy)
    assert not v.modified and not v.missing
    assert v.inconsistent and v.inconsistent[0].startswith("results.json")


def test_a_rehashed_edit_of_results_csv_is_caught(run_dir, tmp_path):
    """The spreadsheet is what people open: its figures are re-derived like the JSON files."""
    from satbench.report.integrity import write_sums

    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    rows = list(csv.reader((copy / "results.csv").read_text().splitlines()))
    col = rows[0].index("output_tok_per_s")
    rows[1][col] = str(float(rows[1][col]) * 1.01)
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    (copy / "results.csv").write_text(buf.getvalue())
    write_sums(copy)
    v = verify(copy)
    assert not v.modified
    assert v.inconsistent == ["results.csv: row 1 differs from a fresh analysis (output_tok_per_s)"]
    rows[0][rows[0].index("run_id")] = "run"  # a renamed column must not switch the comparison off
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    (copy / "results.csv").write_text(buf.getvalue())
    write_sums(copy)
    assert verify(copy).inconsistent == ["results.csv: columns this satbench does not write: run"]
    (copy / "results.csv").write_text("")
    write_sums(copy)
    assert verify(copy).inconsistent == ["results.csv: empty"]
    del rows[0][0:1]  # an earlier satbench without the run_id column: the shared columns still count
    for row in rows[1:]:
        del row[0:1]
    rows[1][rows[0].index("output_tok_per_s")] = "1e9"
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    (copy / "results.csv").write_text(buf.getvalue())
    write_sums(copy)
    assert verify(copy).inconsistent == [
        "results.csv: row 1 differs from a fresh analysis (output_tok_per_s)"]


def test_an_emptied_sha256sums_fails_and_an_invented_verdicts_file_is_caught(run_dir, tmp_path, capsys):
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    (copy / SUMS_FILE).write_text("")
    v = verify(copy)
    assert not v.ok
    assert {"run.json", "events.jsonl", "results.json", "recommendations.json"} <= set(v.uncovered)
    assert main(["verify", str(copy)]) == 7
    assert "NOT COVERED by SHA256SUMS: run.json" in capsys.readouterr().out
    from satbench.report.integrity import write_sums

    (copy / "verdicts.json").write_text('{"schema_version": "1.0", "lanes": []}\n')  # this run ran no checks
    write_sums(copy)
    v = verify(copy)
    assert not v.uncovered and v.inconsistent == ["verdicts.json: the raw files hold no fairness checks"]


def _as_written_by_an_earlier_satbench(path: Path, version: str, change=None) -> None:
    """Rewrite a derived JSON file as the schema before runtime.binary_sha256 existed."""
    def drop(node):
        if isinstance(node, dict):
            node.pop("binary_sha256", None)
            for v in node.values():
                drop(v)
        elif isinstance(node, list):
            for v in node:
                drop(v)

    data = json.loads(path.read_text())
    drop(data)
    data["schema_version"] = version
    if change:
        change(data)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def _drop_keys(node, *keys) -> None:
    """Remove `keys` wherever they occur among the repetitions (as a satbench before them wrote the file)."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "repetitions" and isinstance(v, list):
                for rep in v:
                    for key in keys:
                        assert rep.pop(key, None) is not None or key != "p95_e2e_ms", rep
            else:
                _drop_keys(v, *keys)
    elif isinstance(node, list):
        for v in node:
            _drop_keys(v, *keys)


@pytest.fixture
def results_schema_one_minor_later(monkeypatch):
    """This satbench as (at least) the next minor version of results.json after 3.0."""
    from satbench.analysis import results

    field = results.ResultsFile.model_fields["schema_version"]
    later = f"3.{max(1, int(results.RESULTS_SCHEMA_VERSION.split('.')[1]))}"
    monkeypatch.setattr(results, "RESULTS_SCHEMA_VERSION", later)
    monkeypatch.setattr(field, "default", later)
    results.ResultsFile.model_rebuild(force=True)
    yield
    monkeypatch.undo()
    results.ResultsFile.model_rebuild(force=True)


@pytest.mark.parametrize("results_version, change, consistent", [
    ("3.0", None, True),  # an additive change since: the old bundle still verifies
    # fields 3.1 added (figures)
    ("3.0", lambda d: _drop_keys(d, "p95_ttft_ms", "p95_itl_ms", "p95_e2e_ms"), True),
    ("3.0", lambda d: d["lanes"][0]["levels"][0]["throughput"]["output_tok_per_s"].update(value=1.0), False),
    ("2.6", None, False),  # another major version is not read under this one
])
def test_a_bundle_from_an_earlier_minor_schema_verifies_and_its_figures_are_still_checked(
        run_dir, tmp_path, capsys, results_version, change, consistent, results_schema_one_minor_later):
    from satbench.report.integrity import write_sums

    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    _as_written_by_an_earlier_satbench(copy / "results.json", results_version, change)
    digest = hashlib.sha256((copy / "results.json").read_bytes()).hexdigest()  # as that satbench wrote it
    _as_written_by_an_earlier_satbench(copy / "recommendations.json", "1.1",
                                       lambda d: d.update(results_sha256=digest))
    write_sums(copy)
    v = verify(copy)
    assert not v.modified and not v.missing
    if consistent:
        assert v.ok and v.older_schema == ["results.json: schema 3.0", "recommendations.json: schema 1.1"]
        assert main(["verify", str(copy)]) == 0
        assert "consistent under the current schemas: results.json: schema 3.0" in capsys.readouterr().out
    else:
        assert not v.ok and v.inconsistent[0].startswith("results.json: differs"), v.inconsistent
        assert f"written as schema {results_version}" in v.inconsistent[0]


@pytest.mark.parametrize("factor, consistent", [(1 + 1e-12, True), (1 + 1e-4, False)])
def test_figures_that_differ_only_in_the_last_bits_verify_and_an_edit_does_not(run_dir, tmp_path, factor,
                                                                                 consistent):
    """A bundle derived on the machine that measured it (another Python, numpy or scipy) carries
    the same figures to ~1e-14: that verifies, and says so; an edit of 1e-4 is caught."""
    from satbench.report.integrity import write_sums

    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    res = json.loads((copy / "results.json").read_text())
    res["lanes"][0]["levels"][0]["latency"]["ttft_ms"]["mean"] *= factor
    (copy / "results.json").write_text(json.dumps(res, indent=2, sort_keys=True) + "\n")
    recs = json.loads((copy / "recommendations.json").read_text())  # made from that results.json there
    recs["results_sha256"] = hashlib.sha256((copy / "results.json").read_bytes()).hexdigest()
    (copy / "recommendations.json").write_text(json.dumps(recs, indent=2, sort_keys=True) + "\n")
    write_sums(copy)
    v = verify(copy)
    assert not v.modified and not v.missing
    if consistent:
        assert v.ok and v.rounding == ["results.json"]
    else:
        assert not v.ok and v.inconsistent[0].startswith("results.json: differs") and not v.rounding


def test_a_later_satbench_release_still_verifies_the_bundle(run_dir, monkeypatch):
    """recommendations.json names the satbench that measured the run, not the one recomputing it."""
    import satbench

    monkeypatch.setattr(satbench, "__version__", "9.9.9")
    v = verify(run_dir)
    assert v.ok, v.inconsistent
    assert json.loads((run_dir / "recommendations.json").read_text())["satbench_version"] != "9.9.9"


def test_close_compares_numbers_to_rounding_and_everything_else_exactly():
    from satbench.records.artifacts import close

    assert close({"a": [1.0, 2, "x"]}, {"a": [1.0 + 1e-15, 2, "x"]})
    assert not close({"a": 1.0}, {"a": 1.001}) and not close({"a": 1}, {"a": 2})
    assert not close({"a": 1.0}, {"a": 1.0, "b": None}) and not close([1.0], [1.0, 1.0])
    assert not close(True, 1) and not close("1", 1.0) and close(0.0, 4e-31)  # a bound fit at 0 either way


def test_deleting_every_derived_file_and_regenerating_gives_the_same_report(run_dir, tmp_path):
    copy = tmp_path / "run"  # same name: the run id is the directory's name
    shutil.copytree(run_dir, copy)
    before = (copy / "EVIDENCE.md").read_text().replace(str(run_dir), "RUN")
    before_csv = (copy / "results.csv").read_text()
    plots_before = sorted(p.name for p in (copy / "plots").iterdir())
    for name in DERIVED_FILES:
        (copy / name).unlink(missing_ok=True)
    shutil.rmtree(copy / "plots")
    assert main(["analyze", str(copy)]) == 0
    assert main(["report", str(copy)]) == 0
    after = (copy / "EVIDENCE.md").read_text().replace(str(copy), "RUN").replace(str(run_dir), "RUN")

    def strip(text):  # identical but for recommendations.json's hash (its created_at is new)
        return [line for line in text.splitlines()
                if "sha256 `" not in line or "recommendations.json" not in line]

    assert strip(before) == strip(after)
    assert (copy / "results.csv").read_text() == before_csv
    assert sorted(p.name for p in (copy / "plots").iterdir()) == plots_before
    assert verify(copy).ok


def test_report_refuses_a_directory_that_is_not_a_run(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 5
    assert capsys.readouterr().err.count("\n") == 1


CHROMIUM = find_chromium()


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (.ci/run installs Debian's chromium; "
                                             "apt-get install chromium)")
def test_the_html_report_loads_offline_in_headless_chromium_and_shows_every_plot(run_dir, tmp_path):
    alone = tmp_path / "report.html"  # a copy alone in a folder: it must need no other file
    shutil.copy(run_dir / "report.html", alone)
    page = open_page(alone, CHROMIUM)
    assert page.errors == []
    assert page.title.startswith("satbench run ")
    assert all(u.startswith(("file:", "data:")) for u in page.requests), page.requests  # no network
    plots = sorted(p.name for p in (run_dir / "plots").iterdir())
    assert sorted(Path(i["plot"]).name for i in page.images) == plots
    for img in page.images:
        assert img["complete"] and img["natural_w"] >= 600 and img["src_scheme"] == "data", img
        assert img["shown_w"] >= 600, img  # legible: not shrunk below 600 px in a 1280-px window
    assert page.tables >= 4
    (run_dir / ".." / "report-screenshot.png").resolve().write_bytes(page.screenshot_png)


@pytest.mark.parametrize("edit, consistent", [
    (lambda d: d["definitions"].update(ttft_ms="worded otherwise by another build"), True),
    (lambda d: d["lanes"][0]["levels"][0]["throughput"]["output_tok_per_s"].update(value=1.0), False),
])
def test_definitions_worded_otherwise_under_the_same_schema_still_verify(run_dir, tmp_path, edit, consistent):
    """`definitions` restates the formulas in prose: a build that words one otherwise (same schema)
    wrote the same figures. The committed CPU bundle failed verify over exactly that."""
    from satbench.report.integrity import write_sums

    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    data = json.loads((copy / "results.json").read_text())
    edit(data)
    (copy / "results.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    rec = json.loads((copy / "recommendations.json").read_text())
    rec["results_sha256"] = hashlib.sha256((copy / "results.json").read_bytes()).hexdigest()
    (copy / "recommendations.json").write_text(json.dumps(rec, indent=2, sort_keys=True) + "\n")
    write_sums(copy)
    v = verify(copy)
    if consistent:
        assert v.ok and any("definitions worded otherwise" in o for o in v.older_schema), \
            (v.inconsistent, v.older_schema)
    else:
        assert not v.ok and v.inconsistent[0].startswith("results.json: differs"), v.inconsistent


def test_recommend_on_a_reported_run_says_the_bundle_needs_writing_again(run_dir, tmp_path, capsys):
    """`recommend` rewrites recommendations.json (a new created_at): verify then fails on the untouched
    run; say so at once, and how to write the bundle again. analyze writes results.json byte for byte
    the same, so it says nothing."""
    from satbench.report.integrity import write_sums

    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    rec = copy / "recommendations.json"  # written long ago: a rewrite now cannot be byte-identical
    created_at = json.loads(rec.read_text())["created_at"]
    rec.write_text(rec.read_text().replace(created_at, "2020-01-01T00:00:00+00:00"))
    write_sums(copy)
    assert main(["analyze", str(copy)]) == 0
    assert "no longer matches" not in capsys.readouterr().err
    assert main(["recommend", str(copy)]) == 0
    err = capsys.readouterr().err
    assert "note: recommendations.json rewritten, so the report's SHA256SUMS no longer matches" in err
    assert f"satbench report {copy}" in err and not verify(copy).ok
    assert main(["report", str(copy)]) == 0 and verify(copy).ok


def test_after_analyze_changed_results_the_note_says_recommend_then_report(run_dir, tmp_path, capsys):
    """results.json rewritten with other bytes: recommendations.json names the old results' sha256,
    so report alone still fails verify; the note says to recommend first, and that passes."""
    from satbench.report.integrity import write_sums

    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    res = copy / "results.json"
    res.write_text(res.read_text().replace('"status": "complete"', '"status": "complete" '))  # other bytes
    write_sums(copy)
    assert main(["analyze", str(copy)]) == 0
    err = capsys.readouterr().err
    assert f"`satbench recommend {copy}` then `satbench report {copy}`" in err, err
    assert main(["recommend", str(copy)]) == 0 and main(["report", str(copy)]) == 0 and verify(copy).ok
