"""Memory peaks per level, including levels shorter than the sampling period."""

from satbench.load.sampler import host_and_client_cpu
from satbench.metrics.level_flags import cpu_contention_flag
from satbench.metrics.level_result import Memory
from satbench.metrics.memory import client_cpu_cores, host_busy_cores, peak_rss_bytes, server_cpu_utilisation
from satbench.records.events import ProcessSample

MS = 1_000_000


def p(t_ms, rss, cpu=None):
    return ProcessSample(lane="default", t_ns=t_ms * MS, rss_bytes=rss, cpu_seconds=cpu)


def test_peak_inside_the_level_with_bracketing_samples():
    samples = [p(0, 100), p(90, 150), p(110, 400), p(190, 300), p(210, 120), p(500, 999)]
    assert peak_rss_bytes(samples, 100 * MS, 200 * MS) == 400
    # a 5 ms level between two samples takes the bracketing ones, not a distant peak
    assert peak_rss_bytes(samples, 195 * MS, 200 * MS) == 300


def test_cpu_cores_from_cpu_second_deltas():
    samples = [p(0, 1, 10.0), p(1000, 1, 11.5)]
    assert server_cpu_utilisation(samples, 0, 1000 * MS) == 1.5


def host(t_ms, server, busy, client):
    return ProcessSample(lane="default", t_ns=t_ms * MS, rss_bytes=1, cpu_seconds=server,
                         host_busy_cpu_seconds=busy, client_cpu_seconds=client)


def test_host_and_client_cores_from_their_own_counters():
    samples = [host(0, 10.0, 100.0, 5.0), host(2000, 12.0, 103.0, 5.5)]
    assert host_busy_cores(samples, 0, 2000 * MS) == 1.5
    assert client_cpu_cores(samples, 0, 2000 * MS) == 0.25
    assert server_cpu_utilisation(samples, 0, 2000 * MS) == 1.0


def test_cpu_contention_flags_a_saturated_host_and_a_neighbour_but_not_a_quiet_one():
    quiet = Memory(server_cpu_cores=1.0, client_cpu_cores=0.2, host_busy_cores=1.3)
    assert cpu_contention_flag(quiet, 2) is None
    saturated = Memory(server_cpu_cores=1.6, client_cpu_cores=0.3, host_busy_cores=1.95)
    flag = cpu_contention_flag(saturated, 2)
    assert flag is not None and flag.startswith("cpu_contention: host 1.95 of 2 cores busy")
    assert "load generator competes" in flag
    neighbour = Memory(server_cpu_cores=1.0, client_cpu_cores=0.2, host_busy_cores=4.0)
    assert "other processes 2.80" in cpu_contention_flag(neighbour, 16)
    assert cpu_contention_flag(Memory(), 2) is None  # not sampled → no claim either way


def test_a_real_sample_reads_this_machine():
    busy, own = host_and_client_cpu()
    assert busy > 0 and own > 0


def test_without_the_servers_own_cpu_no_neighbour_is_claimed_but_a_saturated_host_still_is():
    """A running server (--url) on this machine: its CPU is not read, so what the host spent beyond
    satbench cannot be told from a neighbour's; a saturated host is still flagged, naming the server
    among the others."""
    url_lane = Memory(server_cpu_cores=None, client_cpu_cores=0.2, host_busy_cores=1.2)
    assert cpu_contention_flag(url_lane, 2) is None  # 1.0 core 'other': the server itself
    saturated = Memory(server_cpu_cores=None, client_cpu_cores=0.3, host_busy_cores=1.95)
    flag = cpu_contention_flag(saturated, 2)
    assert flag is not None and "other processes (the server among them) 1.65" in flag


def test_a_saturated_client_host_is_not_said_to_compete_with_a_server_on_another_machine():
    busy = Memory(server_cpu_cores=None, client_cpu_cores=0.5, host_busy_cores=1.95)
    flag = cpu_contention_flag(busy, 2, server_here=False)
    assert flag is not None and "competes with the server" not in flag and "may lag" in flag
    assert "the server among them" not in flag
    assert "competes with the server" in cpu_contention_flag(busy, 2)
