"""An open-loop unit (`open/LANE`) cut short by Ctrl-C runs whole again on --resume: the levels that
finished are not repeated, and only the resumed session's arrivals count for each rate."""

from __future__ import annotations

from satbench.cli.main import main
from satbench.pipeline import results
from satbench.records.events import LevelMark, RequestEvent, read_events
from satbench.records.manifest import read_manifest
from tests.run.interrupt import sweep_interrupted

FLAGS = ["--concurrency", "1", "--requests-per-level", "8", "--repetitions", "1", "--prompt-tokens", "16",
         "--output-tokens", "16", "--rate", "5,40", "--rate-requests", "30", "--max-concurrency", "2"]


def test_an_interrupted_rate_runs_again_and_the_finished_level_does_not(fake_server, tmp_path):
    fake = fake_server(n_slots=2, decode_iteration_ms=5.0)
    run_dir = tmp_path / "run"
    sweep_interrupted(fake.base_url, FLAGS, run_dir, after_units=1, into_next_s=1.0)  # 1 s into the 5/s rate
    before = read_manifest(run_dir)
    assert before.status == "interrupted" and before.completed_units == ["solo/default/1/1"]
    cut = [e for e in read_events(run_dir) if isinstance(e, RequestEvent) and e.scenario == "open"]
    assert len(cut) < 30 and {e.session for e in cut} <= {0}  # (none yet on a host slow to start the rate)
    solo_before = [e for e in read_events(run_dir) if isinstance(e, RequestEvent) and e.scenario == "solo"]

    assert main(["sweep", "--resume", str(run_dir)]) == 0
    after = read_manifest(run_dir)
    assert after.status == "complete" and after.completed_units == ["solo/default/1/1", "open/default"]
    records = read_events(run_dir)
    assert [e for e in records if isinstance(e, RequestEvent) and e.scenario == "solo"] == solo_before
    ends = [m for m in records if isinstance(m, LevelMark) and m.scenario == "open" and m.kind == "level_end"]
    assert [(m.level, m.session, m.status) for m in ends][-2:] == [(1, 1, "complete"), (2, 1, "complete")]
    slow, fast = results(run_dir).lanes[0].rates
    assert (slow.rate_rps, fast.rate_rps) == (5.0, 40.0)
    assert slow.requests == slow.ok == 30 and fast.requests == fast.ok == 30  # the resumed session's only
