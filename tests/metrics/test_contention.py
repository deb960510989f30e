"""The contention guard's rule (metrics/contention.py) on hand-made process samples."""

from __future__ import annotations

from satbench.records.events import ProcessSample


def samples(host_busy: float, server: float, client: float, seconds: int = 3) -> list[ProcessSample]:
    """One sample a second with the CPU seconds that give these cores (busy, server, satbench)."""
    out = []
    for i in range(seconds + 1):
        t = i * 1_000_000_000
        out.append(ProcessSample(t_ns=t, lane="l", scenario="solo", rss_bytes=1, cpu_seconds=server * i,
                                 host_busy_cpu_seconds=host_busy * i, client_cpu_seconds=client * i,
                                 server_pid=7, client_pid=8))
    return out


def test_other_processes_with_a_quarter_core_contend(contention_guard):
    why = contention_guard.contention(samples(1.4, 1.0, 0.1), 0, 3_000_000_000, 2, True)
    assert why is not None and "other processes used 0.30 cores" in why


def test_a_neighbour_beside_idle_cores_is_not_contention(contention_guard):
    """The H200 node: host 1.57 of 16 busy, server 1.13, satbench 0.18, others 0.26 — 14 cores idle."""
    assert contention_guard.contention(samples(1.57, 1.13, 0.18), 0, 3_000_000_000, 16, True) is None
    why = contention_guard.contention(samples(15.3, 14.8, 0.18), 0, 3_000_000_000, 16, True)
    assert why is not None and "other processes used 0.32 cores" in why
    why = contention_guard.contention(samples(4.0, 1.0, 0.2), 0, 3_000_000_000, 16, True)
    assert why is not None and "other processes used 2.80 cores" in why  # a whole core or more


def test_a_server_that_fills_the_machine_itself_is_not_contention(contention_guard):
    assert contention_guard.contention(samples(1.98, 1.93, 0.04), 0, 3_000_000_000, 2, True) is None


def test_a_saturated_host_with_a_tenth_core_of_others_contends(contention_guard):
    assert contention_guard.contention(samples(1.95, 1.7, 0.1), 0, 3_000_000_000, 2, True) is not None


def test_without_the_server_cpu_nothing_is_called_contended(contention_guard):
    s = [x.model_copy(update={"cpu_seconds": None, "server_pid": None}) for x in samples(1.9, 1.0, 0.1)]
    assert contention_guard.contention(s, 0, 3_000_000_000, 2, True) is None
