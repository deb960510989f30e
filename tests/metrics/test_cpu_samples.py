"""A level's CPU figures come from the processes that ran it (D1): a resumed session's satbench or a
restarted server is another process whose counters start afresh, so mixing them gave negative
cores; a counter that went backwards is null with a reason, never negative. Host and satbench CPU
are sampled for url lanes too (D2), so cpu_contention can be raised there."""

from __future__ import annotations

import asyncio
import itertools
import os

import pytest

from satbench.http.endpoint import Endpoint
from satbench.load.sampler import ServerSampler
from satbench.metrics.level import summarize_level
from satbench.metrics.memory import (
    client_cpu_cores,
    cpu_why,
    host_busy_cores,
    peak_rss_bytes,
    server_cpu_utilisation,
)
from satbench.metrics.unavailable import cpu_failures
from satbench.records.events import ProcessSample
from tests.builders import MS, ListSink, mark
from tests.metrics.test_level import closed_loop_n1, ctx


def s(t_ms, server_pid, client_pid, cpu, client, host, rss=1000):
    return ProcessSample(lane="default", t_ns=int(t_ms * MS), rss_bytes=rss, cpu_seconds=cpu,
                         client_cpu_seconds=client, host_busy_cpu_seconds=host,
                         server_pid=server_pid, client_pid=client_pid)


def resumed():
    """Session 1 (satbench 10, server 100) ran the level [0, 1000 ms] and was interrupted before its end
    snapshot; session 2 (satbench 20, server 200) samples next, with counters near zero."""
    return [s(-1, 100, 10, 50.0, 5.0, 1000.0), s(500, 100, 10, 50.5, 5.2, 1001.0),
            s(5000, 200, 20, 1.0, 0.5, 1010.0, rss=9999)]


def test_a_resumed_sessions_samples_never_enter_the_interrupted_level():
    samples = resumed()
    assert server_cpu_utilisation(samples, 0, 1000 * MS) == pytest.approx(0.5 / 0.501)  # one process
    assert client_cpu_cores(samples, 0, 1000 * MS) > 0
    assert host_busy_cores(samples, 0, 1000 * MS) > 0
    assert peak_rss_bytes(samples, 0, 1000 * MS) == 1000                  # not the next session's server


def test_a_restarted_server_after_a_kill_is_another_process():
    # server 100 was SIGKILLed during the level (its last readings failed: error samples), satbench
    # restarted it as 300; the first good reading after the level is 300's
    samples = [s(-1, 100, 10, 40.0, 5.0, 1000.0), s(400, 100, 10, 40.8, 5.1, 1000.9),
               ProcessSample(lane="default", t_ns=900 * MS, server_pid=100, client_pid=10,
                             error="NoSuchProcess"),
               s(3000, 300, 10, 0.3, 5.5, 1004.0)]
    cores = server_cpu_utilisation(samples, 0, 1000 * MS)
    assert cores is not None and cores > 0
    # satbench's own and the host's counters are one process throughout: the restart does not cut them
    assert client_cpu_cores(samples, 0, 1000 * MS) == pytest.approx((5.5 - 5.0) / 3.001)


def test_two_server_processes_inside_a_level_or_a_counter_going_back_is_null_with_a_reason():
    mixed = [s(100, 100, 10, 40.0, 5.0, 1000.0), s(600, 200, 10, 0.1, 5.1, 1001.0)]
    assert server_cpu_utilisation(mixed, 0, 1000 * MS) is None
    assert "2 different processes" in cpu_why(mixed, 0, 1000 * MS)
    # samples without pids (an older server_samples.jsonl): a counter that went backwards is not one process
    old = [ProcessSample(lane="default", t_ns=0, cpu_seconds=40.0, client_cpu_seconds=5.0),
           ProcessSample(lane="default", t_ns=2000 * MS, cpu_seconds=1.0, client_cpu_seconds=0.2)]
    assert server_cpu_utilisation(old, 0, 1000 * MS) is None
    assert client_cpu_cores(old, 0, 1000 * MS) is None
    assert "went backwards" in cpu_why(old, 0, 1000 * MS)
    assert "went backwards" in cpu_failures(old, [(0, 1000 * MS)])["client_cpu_cores"]


def test_a_level_after_a_resume_has_no_negative_cpu_and_no_false_contention():
    # this session: 1.33 of 2 host cores busy (server 1.0, satbench 0.17): no contention; the next
    # session's process (read after the level) must not bend that into a saturated host
    samples = [s(-1, 100, 10, 50.0, 5.0, 1000.0), s(300, 100, 10, 50.3, 5.05, 1000.4),
               s(5000, 200, 20, 1.0, 0.5, 1010.0)]
    r = summarize_level(ctx(host_cores=2), closed_loop_n1(), [mark("level_start", 0), mark("level_end", 600)],
                        samples)
    m = r.memory
    assert m.server_cpu_cores is not None and m.server_cpu_cores > 0
    assert m.client_cpu_cores is not None and m.client_cpu_cores > 0
    assert not any(f.startswith("cpu_contention") for f in r.flags), r.flags


def test_null_cpu_figures_carry_a_reason():
    samples = [s(100, 100, 10, 40.0, 5.0, 1000.0)]  # a single reading: no delta
    r = summarize_level(ctx(), closed_loop_n1(), [mark("level_start", 0), mark("level_end", 600)], samples)
    assert r.memory.server_cpu_cores is None
    assert {"server_cpu_cores", "client_cpu_cores", "host_busy_cores"} <= set(r.unavailable)


# ------------------------------------------------------------------ the sampler records its processes

def sampler(**kw) -> tuple[ServerSampler, ListSink]:
    tick = itertools.count(0, 100 * MS)
    w = ListSink()
    return ServerSampler(Endpoint.of("http://127.0.0.1:9"), "default", w, interval_s=0.0,
                         clock=lambda: next(tick), **kw), w


def test_process_samples_name_the_server_and_satbench_processes():
    smp, w = sampler(pid=os.getpid())
    asyncio.run(smp.snapshot())
    (sample,) = w.records
    assert sample.server_pid == os.getpid() and sample.client_pid == os.getpid()


# ------------------------------------------------------------------------ D2: url lanes (no pid)

def test_a_url_lane_samples_host_and_satbench_cpu():
    smp, w = sampler(pid=None, gpus=None, llamacpp=False)
    for _ in range(3):
        asyncio.run(smp.snapshot())
    assert len(w.records) == 3
    assert all(r.host_busy_cpu_seconds is not None and r.client_cpu_seconds is not None for r in w.records)
    assert all(r.rss_bytes is None and r.cpu_seconds is None and r.server_pid is None for r in w.records)

    async def started() -> int:
        await smp.start()
        n = len(smp._tasks)
        await smp.stop()
        return n

    assert asyncio.run(started()) == 1  # the process poller runs for a url lane too
    # the level then has host and satbench figures, and says why the server's is missing
    later = [r.model_copy(update={"t_ns": r.t_ns + 100 * MS}) for r in w.records]
    r = summarize_level(ctx(llamacpp=False), closed_loop_n1(),
                        [mark("level_start", 0), mark("level_end", 600)], later[:3])
    assert r.memory.host_busy_cores is not None and r.memory.client_cpu_cores is not None
    assert r.memory.server_cpu_cores is None and "server_cpu_cores" in r.unavailable
    assert "not started by satbench" in cpu_failures(later[:3], [(0, 600 * MS)])["server_cpu_cores"]
