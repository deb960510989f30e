"""Memory peaks per level, including levels shorter than the sampling period."""

from satbench.events import ProcessSample
from satbench.metrics.memory import peak_rss_bytes, server_cpu_utilisation

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
