"""Sweep flows: a resume after an interrupt during --refine re-runs the levels first chosen (the
cut-short one among them); the together scenario runs only what every lane has; the progress
bar expects the refine levels; a run that died says how to continue it; a second Ctrl-C while
the run cleans up is ignored."""

from __future__ import annotations

import json
import signal

import pytest

from satbench.cli.main import main
from satbench.pipeline import new_sweep as Sweep
from satbench.records.events import LevelMark, RequestEvent, read_events
from satbench.records.manifest import read_manifest, write_manifest
from satbench.run.plan import total_requests
from tests.conftest import url_lane_config


class Recorder:
    """A Progress that counts: the total it was given, what it was told to skip (a negative skip
    adds), the requests it saw; optionally a Ctrl-C (SIGINT) after `interrupt_after` measured
    requests of solo level `interrupt_level`."""

    def __init__(self, interrupt_level: int | None = None, interrupt_after: int = 3) -> None:
        self.total, self.skipped, self.done = 0, 0, 0
        self.interrupt_level, self.interrupt_after, self.seen = interrupt_level, interrupt_after, 0

    def begin(self, total_requests: int) -> None:
        self.total = total_requests

    def level(self, lane, scenario, level, repetition) -> None: ...

    def request_done(self, event) -> None:
        self.done += event.phase != "background"
        if event.level == self.interrupt_level and event.phase == "measured" and event.scenario == "solo":
            self.seen += 1
            if self.seen == self.interrupt_after:
                signal.raise_signal(signal.SIGINT)  # as a Ctrl-C: asyncio cancels the sweep

    def skip(self, requests: int) -> None:
        self.skipped += requests

    def end(self) -> None: ...


def _refine_cfg(url: str):
    # 2 slots, levels 1 and 4: 1 → 4 scales at ~50 %, so --refine measures 2 and 3
    cfg = url_lane_config(url, [1, 4], requests=16, reps=1, prompt=16, output=16)
    return cfg.model_copy(update={"refine": True})


def test_a_resume_after_an_interrupt_during_refine_reruns_the_levels_first_chosen(fake_server, tmp_path,
                                                                                  monkeypatch):
    # the checkout may change meanwhile
    monkeypatch.setattr("satbench.run.sweep.satbench_source", lambda: (None, []))
    fake = fake_server(n_slots=2, decode_iteration_ms=4.0)
    cfg, run_dir = _refine_cfg(fake.base_url), tmp_path / "run"
    run_dir.mkdir()
    with pytest.raises(KeyboardInterrupt):
        Sweep(cfg, run_dir, ["t"], Recorder(interrupt_level=2)).run()
    before = read_manifest(run_dir)
    assert before.status == "interrupted"
    assert before.completed_units == ["solo/default/1/1", "solo/default/4/1"]
    assert before.refine_levels == {"default": [2, 3]}
    expected = total_requests(cfg, frozenset(before.completed_units), before.refine_levels)

    progress = Recorder()
    Sweep(cfg, run_dir, ["t", "--resume"], progress, resume=before).run()
    m = read_manifest(run_dir)
    assert m.status == "complete"
    # the cut-short level 2 ran again, then 3: the levels chosen first, not a new choice
    assert m.completed_units[2:] == ["solo/default/2/1", "solo/default/3/1", "refine/default"]
    assert m.refine_levels == {"default": [2, 3]}
    lv2 = next(lv for lv in json.loads((run_dir / "results.json").read_text())["lanes"][0]["levels"]
               if lv["concurrency"] == 2)
    assert lv2["counts"]["requests_measured"] == 16
    assert not any(f.startswith("repetition_") for f in lv2["flags"])
    # the resume's bar expects the two refine levels (not 0, as before they were on record)
    assert progress.total == expected == (16 + 2) + (16 + 3)
    assert progress.done == progress.total - progress.skipped


def test_the_progress_bar_expects_the_refine_levels_once_they_are_chosen(fake_server, tmp_path):
    fake = fake_server(n_slots=2, decode_iteration_ms=4.0)
    cfg, run_dir = _refine_cfg(fake.base_url), tmp_path / "run"
    run_dir.mkdir()
    progress = Recorder()
    Sweep(cfg, run_dir, ["t"], progress).run()
    assert read_manifest(run_dir).refine_levels == {"default": [2, 3]}
    assert progress.total == (16 + 1) + (16 + 4)  # known at the start: the configured levels
    assert progress.done == progress.total - progress.skipped == (16 + 1) + (16 + 4) + (16 + 2) + (16 + 3)


def test_together_runs_only_what_every_lane_has_and_names_what_it_leaves_out(fake_server, tmp_path, capsys):
    a, b = fake_server(n_slots=4, decode_iteration_ms=3.0), fake_server(n_slots=4, decode_iteration_ms=3.0)
    lanes = tmp_path / "lanes.toml"
    lanes.write_text("together = true\n" + "\n".join(
        f'[[lanes]]\nname = "{name}"\nruntime = "url"\nurl = "{url}"\nconcurrency = {levels}\n'
        f'repetitions = {reps}\nrequests_per_level = 6\nprompt_tokens = 16\noutput_tokens = 4\n'
        for name, url, levels, reps in (("a", a.base_url, [1, 2, 4], 2), ("b", b.base_url, [1, 2], 1))))
    run_dir = tmp_path / "run"
    assert main(["sweep", "--lanes", str(lanes), "-o", str(run_dir)]) == 0
    err = capsys.readouterr().err
    m = read_manifest(run_dir)
    assert [u for u in m.completed_units if u.startswith("together")] == ["together/0/1", "together/1/1"]
    starts = {(r.lane, r.level, r.repetition) for r in read_events(run_dir)
              if isinstance(r, LevelMark) and r.scenario == "together" and r.kind == "level_start"}
    assert starts == {("a", 1, 1), ("a", 2, 1), ("b", 1, 1), ("b", 2, 1)}  # never a lane alone
    assert not [e for e in read_events(run_dir) if isinstance(e, RequestEvent) and e.scenario == "together"
                and (e.level == 4 or e.repetition == 2)]
    assert "satbench: warning: --together: lane a: N=4, repetition 2 measured alone only, not together" in err
    assert "lane b:" not in err
    results = json.loads((run_dir / "results.json").read_text())
    together = {lane["lane"]: [lv["concurrency"] for lv in lane["together_levels"]]
                for lane in results["lanes"]}
    assert together == {"a": [1, 2], "b": [1, 2]}


def test_analyze_of_a_run_that_died_says_how_to_continue_it(fake_server, tmp_path, capsys):
    fake = fake_server(n_slots=2, decode_iteration_ms=2.0)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    Sweep(url_lane_config(fake.base_url, [1], requests=4, reps=1, output=4), run_dir, ["t"]).run()
    m = read_manifest(run_dir)
    m = m.model_copy(update={"status": "running", "status_reason": None, "finished_at": None})  # as SIGKILL
    write_manifest(run_dir, m)
    capsys.readouterr()
    assert main(["analyze", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "None" not in out
    assert "run status: running — the sweep stopped unexpectedly" in out
    assert "satbench sweep --resume" in out

    write_manifest(run_dir, m.model_copy(update={"status": "failed", "status_reason": None}))
    assert main(["analyze", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "run status: failed\n" in out and "None" not in out


def test_a_second_ctrl_c_while_the_run_cleans_up_is_ignored(fake_server, tmp_path, monkeypatch):
    fake = fake_server(n_slots=2, decode_iteration_ms=4.0)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    from satbench.run.sweep import Sweep as SweepClass

    stop, stopped = SweepClass._stop, []

    async def impatient_stop(self, session):
        signal.raise_signal(signal.SIGINT)  # Ctrl-C again while the first one stops the server
        stopped.append(session.lane.name)
        await stop(self, session)

    monkeypatch.setattr(SweepClass, "_stop", impatient_stop)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(KeyboardInterrupt):
        Sweep(url_lane_config(fake.base_url, [1, 2], requests=16, reps=1), run_dir, ["t"],
              Recorder(interrupt_level=1)).run()
    assert stopped == ["default"]  # the cleanup ran to its end
    assert read_manifest(run_dir).status == "interrupted"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # as it was before the run


def test_the_evidence_names_the_levels_measured_alone_only():
    """--together over lanes of unequal length runs what every lane has; EVIDENCE's 'not measured'
    list says which of a lane's levels never ran beside the others."""
    from satbench.report.document import render_markdown
    from satbench.report.evidence import evidence_blocks
    from satbench.saturation.recommendations_file import RecommendationsFile
    from tests.report.test_compare import lane as make_lane
    from tests.report.test_compare import results as make_results

    res = make_results(make_lane("dense", levels=(1, 2, 4), together=(1, 2)),
                       make_lane("moe", levels=(1, 2), together=(1, 2)))
    recs = RecommendationsFile.model_construct(schema_version="x", lanes=[])
    assert "measured alone only" not in render_markdown(evidence_blocks(res, recs, "abc", [], []))
    res.config.together = True
    text = render_markdown(evidence_blocks(res, recs, "abc", [], []))
    assert "lane dense: N=4 measured alone only, not together" in text
    assert text.count("measured alone only") == 1
