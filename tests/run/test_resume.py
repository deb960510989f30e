"""`satbench sweep --resume`: an interrupted run continues from its first unfinished level,
finished levels are not repeated, a cut-short level's first attempt stays on disk but does not
count, and a resume with another configuration is refused, naming the difference."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from satbench.cli.main import main
from satbench.pipeline import verify
from satbench.records.events import LevelMark, RequestEvent, current_session_records, read_events
from satbench.records.manifest import read_manifest, write_manifest
from satbench.run.resume import differences, repair_torn_tail
from tests.builders import replaced
from tests.run.interrupt import sweep_interrupted

FLAGS = ["--concurrency", "1,2", "--requests-per-level", "40", "--repetitions", "2", "--prompt-tokens", "16",
         "--output-tokens", "16"]


@pytest.fixture
def interrupted(fake_server, tmp_path):
    """A run stopped by Ctrl-C while its second unit (N=2, repetition 1) was running."""
    fake = fake_server(n_slots=2, decode_iteration_ms=5.0)
    run_dir = tmp_path / "run"
    sweep_interrupted(fake.base_url, FLAGS, run_dir)  # 0.4 s into the next unit
    return fake, run_dir


def _measured(run_dir, level, rep):
    return [e for e in read_events(run_dir) if isinstance(e, RequestEvent) and e.level == level
            and e.repetition == rep and e.phase == "measured"]


def test_resume_runs_only_the_unfinished_units_and_counts_the_last_attempt(interrupted, capsys):
    _, run_dir = interrupted
    before = read_manifest(run_dir)
    assert before.status == "interrupted" and before.completed_units == ["solo/default/1/1"]
    cut_short = _measured(run_dir, 2, 1)
    assert 0 < len(cut_short) < 40  # the unit the interrupt cut short
    first_unit = _measured(run_dir, 1, 1)

    assert main(["sweep", "--resume", str(run_dir)]) == 0
    m = read_manifest(run_dir)
    assert m.status == "complete"
    assert m.completed_units == ["solo/default/1/1", "solo/default/2/1", "solo/default/1/2",
                                 "solo/default/2/2"]
    assert len(m.resumes) == 1 and m.resumes[0].from_status == "interrupted"
    assert m.resumes[0].units_already_complete == 1 and m.resumes[0].session == 1
    assert list(m.resumes[0].servers) == ["default/solo"]  # the session's own server is on record
    # the finished unit was not repeated: its records are those of the first session, unchanged
    assert [e.request_id for e in _measured(run_dir, 1, 1)] == [e.request_id for e in first_unit]
    assert {e.session for e in _measured(run_dir, 1, 1)} == {0}
    # the cut-short unit ran again in session 1; its first attempt is still on disk
    again = _measured(run_dir, 2, 1)
    assert {e.session for e in again} == {0, 1}
    assert sum(e.session == 1 for e in again) == 40
    kept = [r for r in current_session_records(read_events(run_dir)) if isinstance(r, RequestEvent)
            and r.level == 2 and r.repetition == 1 and r.phase == "measured"]
    assert len(kept) == 40 and {e.session for e in kept} == {1}
    results = json.loads((run_dir / "results.json").read_text())
    lv2 = results["lanes"][0]["levels"][1]
    assert lv2["concurrency"] == 2 and lv2["counts"]["requests_measured"] == 80  # 2 reps × 40, not more
    assert not any(f.startswith("repetition_") for f in lv2["flags"])
    assert verify(run_dir).ok  # the bundle of the resumed run holds together
    evidence = (run_dir / "EVIDENCE.md").read_text()
    assert "The run was resumed" in evidence and "| 1 | " in evidence
    assert "satbench sweep --resume" in evidence

    assert main(["sweep", "--resume", str(run_dir)]) == 2  # complete: nothing to resume
    assert "the run is complete; nothing to resume" in capsys.readouterr().err


def test_resume_with_another_configuration_is_refused_naming_the_difference(interrupted, capsys):
    fake, run_dir = interrupted
    code = main(["sweep", "--resume", str(run_dir), "--url", fake.base_url, "--concurrency", "1,2,4",
                 "--requests-per-level", "40", "--repetitions", "2", "--prompt-tokens", "16",
                 "--output-tokens", "16"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0
    assert ("cannot resume with a different configuration: lanes[0].levels: [1, 2] in the run, [1, 2, 4] now"
            in err)
    # the same flags as the run are accepted
    assert main(["sweep", "--resume", str(run_dir), "--url", fake.base_url, *FLAGS]) == 0


def test_resume_refuses_another_machine_and_a_finished_or_missing_run(interrupted, tmp_path, capsys):
    _, run_dir = interrupted
    m = read_manifest(run_dir)
    fingerprint = m.provenance.host.fingerprint_sha256
    write_manifest(run_dir, replaced(m, {"provenance.host.fingerprint_sha256": "0" * 64}))
    before = _snapshot(run_dir)
    assert main(["sweep", "--resume", str(run_dir)]) == 2
    assert "cannot resume on this machine" in capsys.readouterr().err
    assert _snapshot(run_dir) == before  # a refused resume writes nothing: no failed status, no session
    m = read_manifest(run_dir)
    write_manifest(run_dir, replaced(m, {"provenance.host.fingerprint_sha256": fingerprint,
                                         "provenance.satbench_commit": "0" * 40}))  # same version, other code
    before = _snapshot(run_dir)
    assert main(["sweep", "--resume", str(run_dir)]) == 2
    assert "cannot resume: the run was measured by satbench commit 000000000000" in capsys.readouterr().err
    assert _snapshot(run_dir) == before
    assert main(["sweep", "--resume", str(tmp_path / "nope")]) == 2
    assert "no such run directory" in capsys.readouterr().err
    assert main(["sweep", "--resume", str(run_dir), "-o", str(tmp_path / "x")]) == 2


def _snapshot(run_dir) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file() and p.name != ".lock"}


def test_a_run_still_being_measured_cannot_be_resumed_beside_it(interrupted, capsys):
    """A second process holding the run directory (a sweep still writing it) makes --resume stop
    before it touches anything; once that process is gone the resume goes ahead."""
    fake, run_dir = interrupted
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path; from satbench.records.rundir import run_lock\n"
        f"with run_lock(Path({str(run_dir)!r})):\n    print('held', flush=True); time.sleep(60)")],
        stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == b"held"
        before = _snapshot(run_dir)
        assert main(["sweep", "--resume", str(run_dir)]) == 2
        err = capsys.readouterr().err
        assert f"is being written by another satbench process (pid {holder.pid})" in err, err
        assert _snapshot(run_dir) == before
        for command in ("analyze", "recommend", "report"):  # derived files would be stale at once
            assert main([command, str(run_dir)]) == 2
            assert "is still being measured by satbench" in capsys.readouterr().err
        assert _snapshot(run_dir) == before
    finally:
        holder.kill()
        holder.wait()
    assert main(["sweep", "--resume", str(run_dir), "--url", fake.base_url, *FLAGS]) == 0


def test_a_reboot_between_run_and_resume_is_refused(interrupted, capsys):
    _, run_dir = interrupted
    mark = LevelMark(kind="level_end", lane="default", level=1, repetition=9, t_ns=2**62)
    with (run_dir / "events.jsonl").open("a") as fh:  # a stamp from "before the reboot", far ahead of now
        fh.write(mark.model_dump_json() + "\n")
    assert main(["sweep", "--resume", str(run_dir)]) == 2
    assert "monotonic clock went back" in capsys.readouterr().err


def test_a_torn_last_line_is_cut_before_appending(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text('{"a": 1}\n{"b": 2}\n{"c": ')
    assert repair_torn_tail(path) == len('{"c": ')
    assert path.read_text() == '{"a": 1}\n{"b": 2}\n'
    assert repair_torn_tail(path) == 0


def test_differences_name_each_leaf():
    a = {"lanes": [{"levels": [1, 2], "workload": {"prompt_tokens": 64}}], "together": False}
    b = {"lanes": [{"levels": [1, 2], "workload": {"prompt_tokens": 128}}], "together": True}
    assert differences(a, b) == ["lanes[0].workload.prompt_tokens: 64 in the run, 128 now",
                                 "together: False in the run, True now"]
    assert differences(a, a) == []


def test_the_progress_total_counts_only_what_is_left():
    from satbench.config.schema import LaneConfig, RunConfig, RuntimeConfig
    from satbench.run.plan import total_requests

    lane = LaneConfig(levels=[1, 2], requests_per_level=10, repetitions=2,
                      runtime=RuntimeConfig(kind="url", model=None, url="http://127.0.0.1:1"))
    cfg = RunConfig(lanes=[lane])
    per = {1: 10 + 1, 2: 10 + 2}  # measured + one warmup per stream
    assert total_requests(cfg) == 2 * (per[1] + per[2])
    assert total_requests(cfg, frozenset({"solo/default/1/1", "solo/default/2/1"})) == per[1] + per[2]
