"""Shared fixtures: the fake llama.cpp server in its own process, so `Sweep.run` can own its loop.
xdist hands out whole modules (`--dist loadscope`, pyproject.toml), so a module-scoped fixture is
built once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

FAKE = Path(__file__).parent / "fakes" / "fake_llama_server.py"

# an exception satbench did not expect propagates in the tests (the CLI would make it one line): a
# test that drives input which hits a bug fails with its traceback instead of passing on an exit code
os.environ.setdefault("SATBENCH_TRACEBACK", "1")

def _no_contention(*_args, **_kwargs) -> None:
    return None


REAL_CONTENTION = None  # the guard's own rule, for the tests of it (`contention_guard`)


def pytest_configure(config: pytest.Config) -> None:
    # The contention guard (metrics/contention.py) is off in the tests but those of it: the suite runs
    # several workers on few cores, so every level of every sweep would be contended, re-measured and
    # kept out of its knee. Its tests turn it on (`contention_guard` fixture).
    global REAL_CONTENTION
    import satbench.metrics.contention as guard

    if REAL_CONTENTION is None:
        REAL_CONTENTION = guard.contention
    guard.contention = _no_contention  # type: ignore[assignment]


class FakeProcess:
    def __init__(self, tmp: Path, script: dict, port: int = 0) -> None:
        self.log = tmp / "schedule.jsonl"
        script = {**script, "schedule_log": str(self.log)}
        (tmp / "script.json").write_text(json.dumps(script))
        ready = tmp / "ready.json"
        self.proc = subprocess.Popen([sys.executable, str(FAKE), "--port", str(port), "--script",
                                      str(tmp / "script.json"), "--ready-file", str(ready)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 20
        while not ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"fake server did not start: {self.proc.stderr.read().decode()[-500:]}")
            time.sleep(0.02)
        self.base_url = json.loads(ready.read_text())["base_url"]

    def stop(self) -> list[dict]:
        """Stop the fake and return its schedule (one record per request it served)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=20)
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=20)


@pytest.fixture
def contention_guard(monkeypatch):
    """The contention guard as satbench runs it (the suite turns it off: pytest_configure)."""
    import satbench.metrics.contention as guard

    monkeypatch.setattr(guard, "contention", REAL_CONTENTION)
    return guard


@pytest.fixture
def fake_server(tmp_path):
    started: list[FakeProcess] = []

    def start(port: int = 0, **script) -> FakeProcess:
        d = tmp_path / f"fake{len(started)}"
        d.mkdir()
        fp = FakeProcess(d, script, port)
        started.append(fp)
        return fp

    yield start
    for fp in started:
        if fp.proc.poll() is None:
            fp.proc.kill()
            fp.proc.wait(timeout=20)


def url_lane_config(url: str, levels, requests=12, reps=2, prompt=32, output=16, slo=None):
    """A one-lane run against a server at `url` (the fake), as the sweep tests use it."""
    from satbench.config.schema import LaneConfig, RunConfig, RuntimeConfig, WorkloadConfig

    return RunConfig(lanes=[LaneConfig(levels=levels, requests_per_level=requests, repetitions=reps,
                                       workload=WorkloadConfig(prompt_tokens=prompt, output_tokens=output),
                                       runtime=RuntimeConfig(kind="url", model=None, url=url), slo=slo)])


def sweep_fake(tmp: Path, script: dict, levels, **lane):
    """Start the fake with `script`, sweep it into tmp/run, stop it: (results, run dir, fake's schedule)."""
    from satbench.pipeline import new_sweep as Sweep

    fake = FakeProcess(tmp, script)
    run_dir = tmp / "run"
    run_dir.mkdir()
    try:
        results = Sweep(url_lane_config(fake.base_url, levels, **lane), run_dir, ["satbench", "test"]).run()
    finally:
        schedule = fake.stop()
    return results, run_dir, schedule
