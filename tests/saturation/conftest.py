"""The sweep the saturation tests share: built once per session (24 s of the fake's timers), each
test deriving from its own deep copy."""

from __future__ import annotations

import pytest

from satbench.host.gpu import NvmlGpus
from tests.builders import replaced
from tests.host.test_gpu import FakeNvml


@pytest.fixture(scope="session")
def flat_run(tmp_path_factory):
    """A real sweep of the fake server at N = 1, 2, 4 with a fake NVML of two GPUs (30 % and 0 % busy).
    Each busy slot adds 6 ms to a 2 ms iteration: 1→2 gains 14 %, 2→4 only 8 %: the knee is 2. The
    levels' output rates (and their repetitions') are then pinned to those the script gives
    (N ÷ iteration, CI ±1 %): a busy host bends the measured ones around the 10 % threshold, and the
    tests here are about what a knee is bound by, not where it lies (tests/saturation/test_knee_usl.py).
    Shared: a test copies it (`model_copy(deep=True)`) before changing anything."""
    import satbench.run.sweep
    from tests.conftest import sweep_fake

    mp = pytest.MonkeyPatch()
    mp.setattr(satbench.run.sweep, "open_nvml", lambda: NvmlGpus(FakeNvml(util=(30, 0), clock=(1980, 300))))
    try:
        results, _, _ = sweep_fake(tmp_path_factory.mktemp("bound"),
                                   dict(n_slots=8, decode_iteration_ms=2.0, decode_ms_per_busy_slot=6.0),
                                   [1, 2, 4], requests=32, reps=2, prompt=16, output=16)
    finally:
        mp.undo()
    for k, lv in enumerate(results.lanes[0].levels):
        # tokens/s: one token per stream per iteration of 2 ms + 6 ms per busy slot
        rate = lv.concurrency / ((2.0 + 6.0 * lv.concurrency) / 1000.0)
        est = lv.throughput.output_tok_per_s.model_copy(
            update={"value": rate, "ci_low": rate * 0.99, "ci_high": rate * 1.01})
        reps = [rep.model_copy(update={"output_tok_per_s": rate * (1.0 + 0.005 * (-1) ** i)})
                for i, rep in enumerate(lv.repetitions)]  # the knee's P(gain) reads the repetitions
        results = replaced(results, {f"lanes.0.levels.{k}.throughput.output_tok_per_s": est,
                                     f"lanes.0.levels.{k}.repetitions": reps})
    return results
