"""A server that falls over at some concurrency (llama.cpp b11434 aborted on a 64-expert MoE at 64
sequences): the level is recorded as failed, the lane's higher levels are not asked for again, a
fresh server measures what remains below it, the recommendation stays below it, and everything
else in the run (other lanes, the report) completes."""

from __future__ import annotations

import json
import re

import psutil

from satbench.cli.main import main
from satbench.records.events import LevelMark, read_events
from tests.faults.common import FAKE_BIN, analyzable, one_error_line, status_of, table_row


def test_a_native_server_that_crashes_at_4_in_flight_is_restarted_and_the_run_completes(
        tiny_gguf, tmp_path, capsys, monkeypatch):
    log = tmp_path / "schedule.jsonl"
    # 40 ms iterations: batching 2 then clearly doubles throughput even on a loaded host (at the
    # default 10 ms, CPU contention once made N=2 look like no gain and the knee bound instead)
    monkeypatch.setenv("FAKE_BIN_SCRIPT", json.dumps({"die_at_busy_slots": 4, "schedule_log": str(log),
                                                      "decode_iteration_ms": 40.0}))
    run_dir = tmp_path / "run"
    code = main(["sweep", "--server-bin", FAKE_BIN, "--model", str(tiny_gguf), "--concurrency", "1,2,4",
                 "--requests-per-level", "8", "--repetitions", "2", "--prompt-tokens", "48",
                 "--output-tokens", "4", "-o", str(run_dir)])
    line = one_error_line(capsys.readouterr().err)
    assert code == 4
    assert line.startswith("satbench: lane default: level 4 (repetition 1) failed: the server process was "
                           "killed by SIGKILL (signal 9)")
    assert "recommendations stay below that level" in line
    assert status_of(run_dir) == "complete"

    manifest = json.loads((run_dir / "run.json").read_text())
    failure, = manifest["server_failures"]
    assert (failure["level"], failure["repetition"], failure["unit"]) == (4, 1, "solo/default/4/1")
    assert failure["skipped_units"] == ["solo/default/4/2"]  # never asked for 4 again
    assert failure["restarted"] and failure["server_log"] == "server.log"
    assert failure["restarted_server"]["pid"] != manifest["provenance"]["lanes"]["default"]["runtime"]["pid"]
    assert not psutil.pid_exists(failure["restarted_server"]["pid"])  # the fresh server was stopped too
    # repetition 2 of levels 1 and 2 ran on the fresh server, whose log sits beside the dead one's
    assert {"solo/default/1/2", "solo/default/2/2"} <= set(manifest["completed_units"])
    assert (run_dir / "server-default-restart1.log").is_file() and (run_dir / "server.log").is_file()
    ends = [m for m in read_events(run_dir) if isinstance(m, LevelMark) and m.kind == "level_end"]
    assert sorted((m.level, m.repetition) for m in ends) == [(1, 1), (1, 2), (2, 1), (2, 2), (4, 1)]

    results = analyzable(run_dir)
    lane = results["lanes"][0]
    by_n = {lv["concurrency"]: lv for lv in lane["levels"]}
    assert by_n[4]["repetitions"][0]["status"] == "failed"
    assert any(f.startswith("repetition_failed: r1") for f in by_n[4]["flags"])
    assert lane["server_failures"][0]["level"] == 4
    rec = json.loads((run_dir / "recommendations.json").read_text())["lanes"][0]
    assert rec["server_failure_cap"] == 3
    # the failure binds at 2, the top level below it; a host loaded enough to hide the gain from 1 to 2
    # (CPU contention, even at 40 ms iterations) leaves the knee at 1 binding instead, or, when the gain
    # cannot be told from noise, the answer is the range from 1 to 2 (undetermined, 1 recommended):
    # never above the cap
    binding = (rec["binding"]["reason"], rec["recommended_concurrency"])
    assert binding in (("server_failed", 2), ("knee", 1), ("undetermined", 1)), rec["binding"]
    assert binding[0] != "server_failed" or "level 4" in rec["binding"]["detail"]
    assert all(m["concurrency"] < 4 for m in rec["measured_levels"])
    evidence = (run_dir / "EVIDENCE.md").read_text()
    assert "## Server failures" in evidence and "level 4 (repetition 1) failed" in evidence
    assert main(["verify", str(run_dir)]) == 0
    table_row("server crashes at 4 in flight (native)", "stand-in llama-server, die_at_busy_slots=4",
              code, line, "complete", 0, 0)


def test_a_crashing_lane_does_not_stop_the_other_lane(fake_server, tmp_path, capsys):
    good = fake_server(n_slots=4, decode_iteration_ms=4.0)
    bad = fake_server(n_slots=4, decode_iteration_ms=4.0, die_at_busy_slots=2)
    lanes = tmp_path / "lanes.toml"
    lanes.write_text("\n".join(
        f'[[lanes]]\nname = "{name}"\nruntime = "url"\nurl = "{fake.base_url}"\nconcurrency = [1, 2]\n'
        f'repetitions = 1\nrequests_per_level = 8\nprompt_tokens = 16\noutput_tokens = 4\n'
        for name, fake in (("bad", bad), ("good", good))))
    run_dir = tmp_path / "run"
    code = main(["sweep", "--lanes", str(lanes), "-o", str(run_dir)])
    line = one_error_line(capsys.readouterr().err)
    assert code == 4 and line.startswith("satbench: lane bad: level 2 (repetition 1) failed")
    assert status_of(run_dir) == "complete"
    failure, = json.loads((run_dir / "run.json").read_text())["server_failures"]
    assert failure["lane"] == "bad" and not failure["restarted"]  # a URL server cannot be restarted
    recs = {r["lane"]: r for r in json.loads((run_dir / "recommendations.json").read_text())["lanes"]}
    assert recs["bad"]["recommended_concurrency"] == 1 and recs["bad"]["binding"]["reason"] == "server_failed"
    assert recs["good"]["recommended_concurrency"] == 2 and recs["good"]["server_failure_cap"] is None
    results = analyzable(run_dir)
    good_levels = next(lane for lane in results["lanes"] if lane["lane"] == "good")["levels"]
    assert [lv["counts"]["requests_ok"] for lv in good_levels] == [8, 8]  # the good lane is whole


def test_a_server_that_dies_in_a_fairness_check_is_recorded_and_caps_the_recommendation(fake_server, tmp_path,
                                                                                       capsys):
    fake = fake_server(n_slots=4, decode_iteration_ms=3.0, die_at_busy_slots=4)
    run_dir = tmp_path / "run"
    code = main(["sweep", "--url", fake.base_url, "--concurrency", "1,2", "--requests-per-level", "8",
                 "--repetitions", "1", "--prompt-tokens", "16", "--output-tokens", "8", "--with-fairness",
                 "-o", str(run_dir)])
    line = one_error_line(capsys.readouterr().err)
    assert code == 4 and line.startswith("satbench: lane default: fairness F1 (4 in flight) failed"), line
    assert status_of(run_dir) == "complete"
    failure, = json.loads((run_dir / "run.json").read_text())["server_failures"]
    assert (failure["scenario"], failure["level"], failure["unit"]) == ("fairness", 4, "fairness/default")
    rec = json.loads((run_dir / "recommendations.json").read_text())["lanes"][0]
    assert rec["server_failure_cap"] == 3 and rec["recommended_concurrency"] == 2
    verdicts = {v["check"]: v for v in analyzable(run_dir)["lanes"][0]["fairness"]}
    assert verdicts["F1"]["verdict"] == "inconclusive"  # a check whose server died proves nothing
    assert verdicts["S3"]["verdict"] in ("pass", "fail", "marginal")  # 2 in flight: judged, before the crash
    for c in ("F2", "F3", "S1", "S2"):  # not run, and they say why
        assert verdicts[c]["verdict"] == "inconclusive", verdicts[c]
        assert verdicts[c]["reason"].startswith(
            "not run: lane default: fairness F1 (4 in flight) failed"), verdicts[c]


def test_a_server_that_dies_while_a_check_is_still_building_requests_is_a_server_failure(
        fake_server, tmp_path, capsys):
    """S2 tokenizes its probes while its decoders run: with the server dead by then, the /tokenize
    error must surface as the server failure it is, not as a start error that ends the run."""
    fake = fake_server(n_slots=8, decode_iteration_ms=3.0, die_at_busy_slots=8)
    run_dir = tmp_path / "run"
    code = main(["fairness", "--url", fake.base_url, "--prompt-tokens", "16", "--output-tokens", "8",
                 "-o", str(run_dir)])
    line = one_error_line(capsys.readouterr().err)
    assert code == 4 and "fairness S2 (8 in flight) failed: the server" in line, line
    assert status_of(run_dir) == "failed"  # a fairness-only run that lost its server measured nothing whole
    failure, = json.loads((run_dir / "run.json").read_text())["server_failures"]
    assert (failure["scenario"], failure["level"]) == ("fairness", 8)
    judged = {v["check"]: v for v in analyzable(run_dir)["lanes"][0]["fairness"]}
    assert judged["S2"]["verdict"] == judged["F3"]["verdict"] == "inconclusive"
    # the narrower checks ran first, on a live server: judged on their own requests, none of them lost
    # to the death (a loaded host may leave F1 inconclusive on its timings: that is its own evidence)
    lost = re.compile(r"^not run|^no F1 requests|^missing|request\(s\) failed")
    for check in ("S3", "F1", "S1"):
        assert not lost.search(judged[check]["reason"] or ""), judged[check]


def test_a_fairness_server_that_cannot_start_keeps_the_measured_sweep(tiny_gguf, tmp_path, capsys,
                                                                      monkeypatch):
    """The checks need a longer context than the sweep (S1's long prompt in every slot); where that
    does not fit (GPU memory), the sweep's figures and recommendation stand and the failure is named."""
    monkeypatch.setenv("FAKE_BIN_MAX_CTX", "4096")
    run_dir = tmp_path / "run"
    code = main(["sweep", "--server-bin", FAKE_BIN, "--model", str(tiny_gguf), "--concurrency", "1,2",
                 "--requests-per-level", "8", "--repetitions", "1", "--prompt-tokens", "48",
                 "--output-tokens", "4", "--with-fairness", "-o", str(run_dir)])
    line = one_error_line(capsys.readouterr().err)
    assert code == 4 and line.startswith("satbench: lane default: the fairness server did not start: "), line
    assert "out of memory" in line and "recommendations stay below" not in line
    assert status_of(run_dir) == "complete"
    failure, = json.loads((run_dir / "run.json").read_text())["server_failures"]
    assert (failure["scenario"], failure["level"], failure["server_log"]) == ("fairness", 0,
                                                                            "server-default-fairness.log")
    rec = json.loads((run_dir / "recommendations.json").read_text())["lanes"][0]
    assert rec["recommended_concurrency"] == 2 and rec["server_failure_cap"] is None


def test_a_server_that_fails_only_beside_the_other_lane_caps_that_lanes_recommendation(fake_server, tmp_path,
                                                                                        capsys):
    """Two lanes on one server that dies at 4 busy slots: each lane alone (2 in flight) is fine,
    the two together at 2 each (4 in flight) kill it. The node serves its lanes at once, so the
    failed lane may not advertise 2."""
    shared = fake_server(n_slots=4, decode_iteration_ms=3.0, die_at_busy_slots=4)
    lanes = tmp_path / "lanes.toml"
    lanes.write_text("together = true\n" + "\n".join(
        f'[[lanes]]\nname = "{name}"\nruntime = "url"\nurl = "{shared.base_url}"\nconcurrency = [1, 2]\n'
        f'repetitions = 1\nrequests_per_level = 8\nprompt_tokens = 16\noutput_tokens = 4\n'
        for name in ("a", "b")))
    run_dir = tmp_path / "run"
    code = main(["sweep", "--lanes", str(lanes), "-o", str(run_dir)])
    line = one_error_line(capsys.readouterr().err)
    assert code == 4 and "together" in line and "recommendations stay below that level" in line, line
    assert status_of(run_dir) == "complete"
    failure, = json.loads((run_dir / "run.json").read_text())["server_failures"]
    assert (failure["scenario"], failure["level"]) == ("together", 2)
    recs = {r["lane"]: r for r in json.loads((run_dir / "recommendations.json").read_text())["lanes"]}
    failed, other = recs[failure["lane"]], recs[({"a", "b"} - {failure["lane"]}).pop()]
    assert failed["server_failure_cap"] == 1 and failed["recommended_concurrency"] == 1
    assert failed["binding"]["reason"] == "server_failed" and "together" in failed["binding"]["detail"]
    # the other lane is not capped by the failure (its answer, 1 or 2, rests on one repetition's timing)
    assert other["server_failure_cap"] is None and other["binding"]["reason"] != "server_failed"
    assert [lv["concurrency"] for lv in other["measured_levels"]] == [1, 2]
    assert [lv["concurrency"] for lv in failed["measured_levels"]] == [1]


def test_the_progress_bar_stops_expecting_what_a_failure_skips(fake_server, tmp_path):
    """Levels 1, 2, 4 once; the server dies at 2 busy slots: level 4 is skipped, so the bar's
    total drops by level 4's requests; a resume then expects nothing of the ruled-out units."""
    from satbench.pipeline import new_sweep as Sweep
    from satbench.records.manifest import read_manifest
    from satbench.run.plan import requests_in, total_requests
    from satbench.run.resume import units_not_to_run
    from tests.conftest import url_lane_config

    class Recorder:
        def __init__(self) -> None:
            self.total, self.skipped, self.done = 0, 0, 0

        def begin(self, total_requests: int) -> None:
            self.total = total_requests

        def level(self, lane, scenario, level, repetition) -> None: ...

        def request_done(self, event) -> None:
            self.done += event.phase != "background"

        def skip(self, requests: int) -> None:
            self.skipped += requests

        def end(self) -> None: ...

    fake = fake_server(n_slots=4, decode_iteration_ms=3.0, die_at_busy_slots=2)
    cfg = url_lane_config(fake.base_url, [1, 2, 4], requests=8, reps=1, prompt=16, output=4)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    progress = Recorder()
    Sweep(cfg, run_dir, ["t"], progress).run()
    level4 = requests_in(cfg, ["solo/default/4/1"])
    assert level4 == 8 + 4 and progress.total == total_requests(cfg) == (8 + 1) + (8 + 2) + level4
    assert progress.skipped == level4
    assert progress.done <= progress.total - progress.skipped
    ruled_out = units_not_to_run(read_manifest(run_dir))
    assert ruled_out == {"solo/default/1/1", "solo/default/2/1", "solo/default/4/1"}
    assert total_requests(cfg, ruled_out) == 0


def test_a_lane_whose_server_never_starts_does_not_throw_away_the_other_lanes_measurements(
        fake_server, tmp_path, capsys):
    """A two-lane run whose first lane's server is down: the failure is recorded, the other lane is
    measured and recommended, and the run ends complete with exit 4 (it used to end `failed`,
    with no recommendations for the lane that worked)."""
    good = fake_server(n_slots=4, decode_iteration_ms=4.0)
    lanes = tmp_path / "lanes.toml"
    lanes.write_text("together = true\n" + "\n".join(
        f'[[lanes]]\nname = "{name}"\nruntime = "url"\nurl = "{url}"\nconcurrency = [1, 2]\n'
        f'repetitions = 1\nrequests_per_level = 8\nprompt_tokens = 32\noutput_tokens = 4\n'
        for name, url in (("down", "http://127.0.0.1:1"), ("good", good.base_url))))
    run_dir = tmp_path / "run"
    code = main(["sweep", "--lanes", str(lanes), "-o", str(run_dir)])
    line = one_error_line(capsys.readouterr().err)
    assert code == 4 and line.startswith("satbench: lane down: the server did not start: cannot reach"), line
    assert status_of(run_dir) == "complete"
    manifest = json.loads((run_dir / "run.json").read_text())
    failure, = manifest["server_failures"]
    assert (failure["lane"], failure["level"], failure["unit"]) == ("down", 0, "solo/down/start")
    assert not any(u.startswith("together") for u in manifest["completed_units"])  # not without "down"
    recs = json.loads((run_dir / "recommendations.json").read_text())["lanes"]
    assert [r["lane"] for r in recs] == ["good"] and recs[0]["recommended_concurrency"]
    assert [f["lane"] for f in analyzable(run_dir)["lanes_not_started"]] == ["down"]
    evidence = (run_dir / "EVIDENCE.md").read_text()
    assert "## Server failures" in evidence and "lane down: the server did not start" in evidence
    assert main(["verify", str(run_dir)]) == 0


def test_a_one_lane_run_whose_server_never_starts_is_a_start_error(tmp_path, capsys):
    assert main(["sweep", "--url", "http://127.0.0.1:1", "-o", str(tmp_path / "run")]) == 3
    assert "cannot reach http://127.0.0.1:1" in capsys.readouterr().err


def _lanes_file(path, lanes) -> None:
    path.write_text("together = true\n" + "\n".join(
        f'[[lanes]]\nname = "{name}"\nruntime = "url"\nurl = "{url}"\nconcurrency = [1, 2]\n'
        f'repetitions = 1\nrequests_per_level = 8\nprompt_tokens = 32\noutput_tokens = 4\n'
        for name, url in lanes))


def test_a_lane_that_was_down_is_measured_by_resume_once_its_server_is_up(fake_server, tmp_path, capsys):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    good = fake_server(n_slots=4, decode_iteration_ms=4.0)
    lanes = tmp_path / "lanes.toml"
    _lanes_file(lanes, (("late", f"http://127.0.0.1:{port}"), ("good", good.base_url)))
    run_dir = tmp_path / "run"
    assert main(["sweep", "--lanes", str(lanes), "-o", str(run_dir)]) == 4
    capsys.readouterr()
    assert status_of(run_dir) == "complete"  # complete, yet resumable: a lane was never measured
    fake_server(port=port, n_slots=4, decode_iteration_ms=4.0)
    # the old failure is resolved
    assert main(["sweep", "--resume", str(run_dir)]) == 0, capsys.readouterr().err
    manifest = json.loads((run_dir / "run.json").read_text())
    assert {"solo/late/1/1", "solo/late/2/1", "together/0/1", "together/1/1"} \
        <= set(manifest["completed_units"])
    recs = json.loads((run_dir / "recommendations.json").read_text())["lanes"]
    assert sorted(r["lane"] for r in recs) == ["good", "late"]
    assert analyzable(run_dir)["lanes_not_started"] == []


def test_a_server_that_will_not_start_for_the_together_scenario_keeps_the_solo_figures(
        fake_server, tmp_path, capsys, monkeypatch):
    from satbench.errors import RuntimeStartError

    a, b = fake_server(n_slots=4, decode_iteration_ms=4.0), fake_server(n_slots=4, decode_iteration_ms=4.0)
    lanes = tmp_path / "lanes.toml"
    _lanes_file(lanes, (("a", a.base_url), ("b", b.base_url)))
    from satbench.run.sweep import Sweep as SweepClass

    start = SweepClass._start

    async def refuse_b_together(self, lane, scenario, *args, **kwargs):
        if lane.name == "b" and scenario == "together":
            raise RuntimeStartError(f"{lane.runtime.url} answers neither /props nor /v1/models")
        return await start(self, lane, scenario, *args, **kwargs)

    monkeypatch.setattr(SweepClass, "_start", refuse_b_together)
    run_dir = tmp_path / "run"
    code = main(["sweep", "--lanes", str(lanes), "-o", str(run_dir)])
    line = one_error_line(capsys.readouterr().err)
    assert code == 4 and line.startswith("satbench: lane b: the server did not start"), line
    assert status_of(run_dir) == "complete"
    failure, = json.loads((run_dir / "run.json").read_text())["server_failures"]
    assert (failure["lane"], failure["scenario"], failure["unit"]) == ("b", "together", "together/b/start")
    recs = {r["lane"]: r for r in json.loads((run_dir / "recommendations.json").read_text())["lanes"]}
    # the solo figures stand
    assert recs["a"]["recommended_concurrency"] and recs["b"]["recommended_concurrency"]
    assert recs["b"]["server_failure_cap"] is None and recs["b"]["binding"]["reason"] != "server_failed"


def test_fairness_on_several_lanes_goes_on_past_a_lane_whose_server_is_down(fake_server, tmp_path, capsys):
    good = fake_server(n_slots=4, decode_iteration_ms=3.0)
    lanes = tmp_path / "lanes.toml"
    _lanes_file(lanes, (("down", "http://127.0.0.1:1"), ("good", good.base_url)))
    lanes.write_text(lanes.read_text().replace("together = true\n", ""))
    run_dir = tmp_path / "run"
    code = main(["fairness", "--lanes", str(lanes), "--checks", "S3", "-o", str(run_dir)])
    line = one_error_line(capsys.readouterr().err)
    assert code == 4 and line.startswith("satbench: lane down: the fairness server did not start"), line
    assert "fairness/good" in json.loads((run_dir / "run.json").read_text())["completed_units"]
