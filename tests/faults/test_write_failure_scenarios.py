"""One failure rule for every load shape: a write that fails mid-run (the disk fills) during a closed-loop
level, an open-loop rate, the fairness checks or the together scenario stops the run at that write,
with one line on stderr (exit 5), no task exception left unretrieved, run.json `failed` as stderr
says; then `--resume` measures what is left and the run ends complete."""

from __future__ import annotations

import errno
import json
import os

import pytest

from satbench.cli.main import main
from satbench.records.events import RequestEvent, read_events
from satbench.records.writer import JsonlWriter
from tests.fakes.fairness_harness import FAIR
from tests.faults.common import all_lines_valid, analyzable, one_error_line, small_sweep, status_of
from tests.faults.test_disk_full import _FillsUpAfter


class _FullFrom:
    """A JsonlWriter's file whose disk fills at the first record holding `needle`: that write and
    every later one fail with ENOSPC."""

    def __init__(self, fh, needle: str) -> None:
        self.fh, self.needle, self.full = fh, needle, False

    def write(self, text: str) -> int:
        if self.full or self.needle in text:
            self.full = True
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return self.fh.write(text)

    def flush(self) -> None:
        self.fh.flush()

    def close(self) -> None:
        self.fh.close()


def _lanes(tmp_path, url: str) -> str:
    lanes = tmp_path / "lanes.toml"
    lanes.write_text("together = true\n" + "\n".join(
        f'[[lanes]]\nname = "{name}"\nruntime = "url"\nurl = "{url}"\nconcurrency = [1, 2]\nrepetitions = 1\n'
        f'requests_per_level = 8\nprompt_tokens = 16\noutput_tokens = 4\n' for name in ("a", "b")))
    return str(lanes)


def shape_argv(shape: str, url: str, run_dir, tmp_path, requests: int = 8, checks: str = "F1") -> list[str]:
    """The command line of a small run of each load shape against the fake at `url`."""
    return {"closed loop": small_sweep(url, run_dir, levels="1,2", requests=requests, output=4),
            "open loop": small_sweep(url, run_dir, levels="1", requests=8, output=4,
                                     extra=("--rate", "40", "--rate-requests", "400")),
            "fairness": ["fairness", "--url", url, "--batch-size", "256", "--prompt-tokens", "32",
                         "--output-tokens", "16", "--checks", checks, "-o", str(run_dir)],
            "together": ["sweep", "--lanes", _lanes(tmp_path, url), "-o", str(run_dir)]}[shape]


SCENARIOS = {
    "closed loop": '"scenario":"solo","level":2',
    "open loop": '"scenario":"open"',
    "fairness": '"scenario":"fairness"',
    "together": '"scenario":"together"',
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_a_failed_write_stops_every_load_shape_and_resume_goes_on(scenario, fake_server, tmp_path, capsys,
                                                                  monkeypatch):
    real_init = JsonlWriter.__init__

    def on_a_filling_disk(self, path, *args, **kw):
        real_init(self, path, *args, **kw)
        if path.name == "events.jsonl":
            self._fh = _FullFrom(self._fh, SCENARIOS[scenario])

    fake = fake_server(**FAIR) if scenario == "fairness" else fake_server(n_slots=4, decode_iteration_ms=2.0)
    run_dir = tmp_path / "run"
    argv = shape_argv(scenario, fake.base_url, run_dir, tmp_path)
    monkeypatch.setattr(JsonlWriter, "__init__", on_a_filling_disk)
    code = main(argv)
    err = capsys.readouterr().err
    assert "never retrieved" not in err and "Traceback" not in err, err[-3000:]
    line = one_error_line(err)
    assert code == 5, line
    assert line.startswith(f"satbench: error: cannot write {run_dir}/events.jsonl: No space"), line
    assert status_of(run_dir) == "failed"
    assert "No space left on device" in json.loads((run_dir / "run.json").read_text())["status_reason"]
    all_lines_valid(run_dir / "events.jsonl")
    kept = (run_dir / "events.jsonl").read_text()
    assert SCENARIOS[scenario] not in kept  # the first failed write was the scenario's first record

    monkeypatch.undo()  # the disk has room again
    code = main(["fairness" if scenario == "fairness" else "sweep", "--resume", str(run_dir)])
    capsys.readouterr()
    assert code in (0, 6), code  # 6: a fairness check failed on the fake, which is not this test's subject
    assert status_of(run_dir) == "complete"
    assert SCENARIOS[scenario] in (run_dir / "events.jsonl").read_text()  # measured by the resume
    analyzable(run_dir)


@pytest.mark.parametrize("command", ["sweep", "fairness"])
def test_a_samples_file_that_cannot_be_written_stops_new_requests_at_once(command, fake_server, tmp_path,
                                                                         capsys, monkeypatch):
    """The sampler's failed write stops the level or check beside it (not only at its end), and the
    fairness command stops on it too (it once ended `complete`, exit 0)."""
    real_init = JsonlWriter.__init__
    held: list[_FillsUpAfter] = []

    def on_a_filling_disk(self, path, *args, **kw):
        real_init(self, path, *args, **kw)
        if path.name == "server_samples.jsonl":
            self._fh = _FillsUpAfter(self._fh, 6000)
            held.append(self._fh)

    fake = fake_server(n_slots=4, decode_iteration_ms=40.0)
    run_dir = tmp_path / "run"
    argv = (small_sweep(fake.base_url, run_dir, levels="2", requests=40, output=20) if command == "sweep"
            else ["fairness", "--url", fake.base_url, "--batch-size", "256", "--prompt-tokens", "32",
                  "--output-tokens", "40", "--checks", "F1", "-o", str(run_dir)])
    monkeypatch.setattr(JsonlWriter, "__init__", on_a_filling_disk)
    code = main(argv)
    err = capsys.readouterr().err
    assert "never retrieved" not in err and "Traceback" not in err, err[-3000:]
    line = one_error_line(err)
    assert code == 5 and "server_samples.jsonl: No space left on device" in line, line
    assert status_of(run_dir) == "failed"
    failed_ns = held[0].failed_ns
    assert failed_ns is not None
    late = [e for e in read_events(run_dir) if isinstance(e, RequestEvent) and e.sent_ns > failed_ns + 10**8]
    assert len(late) <= 2, [(e.phase, e.sent_ns - failed_ns) for e in late]  # at most the streams' next
