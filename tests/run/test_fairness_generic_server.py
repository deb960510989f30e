"""`satbench fairness` against a server that is not llama.cpp sends it nothing: its slots and
n_batch are unknown, so every check would be inconclusive whatever it measured."""

import json

from satbench.analysis.results import VERDICTS_FILE
from satbench.cli.main import main
from satbench.records.events import RequestEvent, read_events


def test_a_generic_server_gets_no_fairness_request_and_inconclusive_verdicts(fake_server, tmp_path, capsys):
    fake = fake_server(n_slots=4, n_batch=256, llamacpp=False, prefill_ms_per_token=0.01,
                       decode_iteration_ms=1.0)
    out = tmp_path / "run"
    assert main(["fairness", "--url", fake.base_url, "--batch-size", "256", "--prompt-tokens", "32",
                 "--output-tokens", "16", "--checks", "F1,S1,S3", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    served = fake.stop()
    events = [r for r in read_events(out) if isinstance(r, RequestEvent) and r.scenario == "fairness"]
    assert events == [] and served == []
    verdicts = json.loads((out / VERDICTS_FILE).read_text())["lanes"][0]["verdicts"]
    assert [v["check"] for v in verdicts] == ["F1", "S1", "S3"]
    assert all(v["verdict"] == "inconclusive" and "not llama.cpp" in v["reason"] for v in verdicts)
    assert "S1 decode stall" in printed and "the server is not llama.cpp" in printed  # the table says why
    run = json.loads((out / "run.json").read_text())
    lane_name = run["config"]["lanes"][0]["name"]
    assert [u for u in run["completed_units"] if u.startswith("fairness/")] == [f"fairness/{lane_name}"]


class _Counting:
    def __init__(self) -> None:
        self.expected = self.done = self.skipped = 0

    def begin(self, total_requests: int) -> None:
        self.expected = total_requests

    def level(self, lane: str, scenario: str, level: int, repetition: int) -> None: ...

    def request_done(self, event) -> None:
        self.done += 1

    def skip(self, requests: int) -> None:
        self.skipped += requests

    def end(self) -> None: ...


def test_the_progress_bar_stops_expecting_the_requests_not_sent(fake_server, tmp_path):
    from satbench.pipeline import new_sweep as Sweep
    from tests.conftest import url_lane_config

    fake = fake_server(n_slots=2, llamacpp=False, decode_iteration_ms=1.0)
    cfg = url_lane_config(fake.base_url, [1], requests=2, reps=1)
    cfg = cfg.model_copy(update={"with_fairness": True})
    progress = _Counting()
    (tmp_path / "run").mkdir()
    Sweep(cfg, tmp_path / "run", ["t"], progress).run()
    assert progress.skipped > 0 and progress.done + progress.skipped == progress.expected
