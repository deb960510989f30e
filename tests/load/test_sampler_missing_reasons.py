"""The sampler keeps what it can and says why the rest is missing: a poller that gave up leaves its
reason for later levels (D4); a failed NVML reading costs neither RSS/CPU nor the process poller
(D5); a killed but unreaped server is no reading, not 0 bytes."""

from __future__ import annotations

import asyncio
import itertools
import os
import subprocess
import time

import psutil
import pytest

from satbench.host.gpu import NvmlGpus
from satbench.http.endpoint import Endpoint
from satbench.load.sampler import MAX_CONSECUTIVE_FAILURES, ServerSampler, process_tree_usage
from satbench.metrics.level import summarize_level
from satbench.records.events import MetricsSample
from tests.builders import MS, ListSink, mark
from tests.host.test_gpu import FakeNvml
from tests.metrics.test_level import closed_loop_n1, ctx


class LostNvml(FakeNvml):
    def nvmlDeviceGetMemoryInfo(self, h):
        raise RuntimeError("NVML_ERROR_GPU_IS_LOST")


def sampler(**kw) -> tuple[ServerSampler, ListSink]:
    # a controllable clock: 100 ms per reading, long before t=0
    tick = itertools.count(-10_000 * MS, 100 * MS)
    w = ListSink()
    return ServerSampler(Endpoint.of("http://127.0.0.1:9"), "default", w, interval_s=0.0,
                         clock=lambda: next(tick), **kw), w


# ------------------------------------------------------------------------- D4: a poller that gave up

def test_a_poller_that_gives_up_says_so_and_later_levels_keep_the_reason():
    s, w = sampler()

    async def answer_501(path):
        return 501, "Not Implemented"

    s._get = answer_501
    asyncio.run(s._loop("metrics", s._metrics))
    assert len(w.records) == MAX_CONSECUTIVE_FAILURES + 1 and "metrics" in s.disabled
    last = w.records[-1]
    assert isinstance(last, MetricsSample)
    assert last.error.startswith("stopped polling after 20 consecutive failures")
    assert "HTTP 501" in last.error
    # a level measured after the poller stopped (its samples all lie seconds before it)
    r = summarize_level(ctx(), closed_loop_n1(), [mark("level_start", 0), mark("level_end", 600)], w.records)
    why = r.unavailable["requests_deferred_max"]
    assert "stopped polling after 20 consecutive failures" in why and "HTTP 501" in why, why
    assert "stopped polling" in r.unavailable["decode_weighted_busy_slots"]


# ----------------------------------------------------------------------------- D5: NVML failing

def test_a_failed_gpu_reading_keeps_rss_and_cpu_and_the_poller_going():
    s, w = sampler(pid=os.getpid(), gpus=NvmlGpus(LostNvml()))
    oks = [asyncio.run(s._process()) for _ in range(MAX_CONSECUTIVE_FAILURES + 5)]
    assert all(oks)  # RSS and CPU were read every time: the process poller never stops for the GPU
    good = [r for r in w.records if r.error is None]
    assert len(good) == len(oks) and all(r.rss_bytes > 0 and r.cpu_seconds is not None for r in good)
    assert all(r.gpu_mem_used_bytes is None for r in good)
    gpu_errors = [r.error for r in w.records if r.error is not None]
    assert len(gpu_errors) == MAX_CONSECUTIVE_FAILURES  # then NVML is no longer read
    assert all("NVML_ERROR_GPU_IS_LOST" in e for e in gpu_errors)
    assert "stopped polling after 20" in gpu_errors[-1] and "gpu" in s.disabled


def test_a_level_keeps_its_memory_figures_when_nvml_fails():
    s, w = sampler(pid=os.getpid(), gpus=NvmlGpus(LostNvml()))
    for _ in range(3):
        asyncio.run(s._process())
    moved = [r.model_copy(update={"t_ns": r.t_ns + 10_100 * MS}) for r in w.records]  # into the level
    r = summarize_level(ctx(), closed_loop_n1(), [mark("level_start", 0), mark("level_end", 600)], moved)
    assert r.memory.peak_rss_bytes and r.memory.peak_rss_bytes > 0
    assert r.memory.peak_gpu_mem_bytes is None
    assert "NVML failed" in r.unavailable["peak_gpu_mem_bytes"] and "GPU_IS_LOST" in r.unavailable["gpu"]


# ------------------------------------------------------------------- a killed, unreaped server

def test_a_zombie_server_is_no_reading_not_zero_bytes():
    child = subprocess.Popen(["true"])
    try:
        deadline = time.monotonic() + 20
        while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "the child did not exit"
            time.sleep(0.01)
        with pytest.raises(psutil.NoSuchProcess):
            process_tree_usage(child.pid)
    finally:
        child.wait()


def test_a_run_recorded_without_the_last_word_still_says_why():
    """server_samples.jsonl written before the poller wrote its last word: the failed polls before
    the level are enough to say why it has no /metrics figures."""
    failed = [MetricsSample(lane="default", sent_ns=t, t_ns=t, error="ParseError: /metrics answered HTTP 501")
              for t in range(-3000 * MS, -1000 * MS, 100 * MS)]
    r = summarize_level(ctx(), closed_loop_n1(), [mark("level_start", 0), mark("level_end", 600)], failed)
    why = r.unavailable["requests_deferred_max"]
    assert "not polled in this level" in why and "HTTP 501" in why, why
