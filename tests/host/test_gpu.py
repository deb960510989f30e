"""GPU figures through a fake NVML: described in provenance, sampled per level, absent = unavailable."""

import json
from types import SimpleNamespace

import pytest

from satbench.host.gpu import NvmlGpus, open_nvml
from satbench.host.hardware import describe_host
from satbench.metrics.gpu import gpu_use
from satbench.metrics.memory import peak_gpu_mem_bytes
from satbench.records.events import ProcessSample


class NvmlNotSupported(Exception):
    """What pynvml raises for a figure the device cannot report (NVML_ERROR_NOT_SUPPORTED)."""


class FakeNvml:
    def __init__(self, util=(5, 40), clock=(1980, 1755)):
        self.used = [10 * 2**30, 2 * 2**30]
        self.util, self.clock = list(util), list(clock)

    def nvmlDeviceGetUtilizationRates(self, h):
        if self.util[h] is None:
            raise NvmlNotSupported()
        return SimpleNamespace(gpu=self.util[h], memory=0)

    def nvmlDeviceGetClockInfo(self, h, kind):
        assert kind == 1  # NVML_CLOCK_SM
        if self.clock[h] is None:
            raise NvmlNotSupported()
        return self.clock[h]

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlSystemGetDriverVersion(self):
        return b"580.95"

    def nvmlSystemGetCudaDriverVersion_v2(self):
        return 13000

    def nvmlDeviceGetName(self, h):
        return "NVIDIA H200"

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=141 * 2**30, used=self.used[h])


def test_nvml_describe_and_memory():
    gpus = NvmlGpus(FakeNvml())
    info = gpus.describe()
    assert [g.name for g in info] == ["NVIDIA H200", "NVIDIA H200"]
    assert info[0].driver == "580.95" and info[0].cuda == "13.0"
    assert gpus.memory_used_bytes() == 12 * 2**30
    assert describe_host(gpus).gpus[0].memory_total_bytes == 141 * 2**30


def test_no_nvml_here_means_no_gpu_not_zero():
    # this machine has no NVIDIA driver: open_nvml must say "none", never a zero-memory GPU
    gpus = open_nvml()
    assert gpus is None or gpus.describe()
    assert describe_host(None).gpus == []


def test_peak_gpu_memory_per_level():
    samples = [ProcessSample(lane="l", t_ns=t, gpu_mem_used_bytes=v)
               for t, v in [(0, 5), (10, 9), (20, 7), (30, 1)]]
    assert peak_gpu_mem_bytes(samples, 5, 25) == 9


def test_a_reading_is_memory_over_all_gpus_and_util_and_clock_of_the_busiest():
    nv = FakeNvml(util=(5, 40), clock=(1980, 1755))
    r = NvmlGpus(nv).reading()
    assert (r.mem_used_bytes, r.util_pct, r.sm_clock_mhz) == (12 * 2**30, 40.0, 1755.0)
    nv.util = [None, None]  # a vGPU that reports no utilisation: unavailable, not 0
    r = NvmlGpus(nv).reading()
    assert r.util_pct is None and r.sm_clock_mhz is None and r.mem_used_bytes == 12 * 2**30
    nv.util, nv.clock = [70, None], [None, None]
    assert NvmlGpus(nv).reading().util_pct == 70.0 and NvmlGpus(nv).reading().sm_clock_mhz is None


def _gpu_sample(t, util, clock, mem):
    return ProcessSample(lane="l", t_ns=t, gpu_mem_used_bytes=mem, gpu_util_pct=util, gpu_sm_clock_mhz=clock)


def test_level_gpu_figures_are_means_inside_the_steady_windows():
    samples = [_gpu_sample(0, 0.0, 300.0, 100),        # idle, before the window: not in the mean
               _gpu_sample(10, 30.0, 1980.0, 500), _gpu_sample(20, 50.0, 1900.0, 700),
               _gpu_sample(30, 0.0, 300.0, 900),       # after the window: only the peak sees it
               _gpu_sample(110, 90.0, 1800.0, 600)]    # second repetition's window
    use = gpu_use(samples, [(5, 25), (100, 120)], peak_mem_bytes=900)
    assert use.samples == 3
    assert use.util_mean_pct == pytest.approx((30 + 50 + 90) / 3) and use.util_max_pct == 90.0
    assert use.sm_clock_mean_mhz == pytest.approx((1980 + 1900 + 1800) / 3)
    assert use.mem_used_mean_bytes == 600 and use.mem_used_peak_bytes == 900
    assert gpu_use([ProcessSample(lane="l", t_ns=10, rss_bytes=5)], [(0, 20)], None) is None  # no GPU: None


def test_a_sweep_with_a_gpu_carries_nvml_figures_into_results_and_the_report(tmp_path, monkeypatch):
    """The whole path with a fake NVML: sampler → server_samples.jsonl → results.json per level →
    EVIDENCE.md's GPU table; provenance names the GPU, driver and CUDA."""
    import satbench.run.sweep
    from tests.conftest import sweep_fake

    monkeypatch.setattr(satbench.run.sweep, "open_nvml",
                        lambda: NvmlGpus(FakeNvml(util=(35, 0), clock=(1980, 300))))
    results, run_dir, _ = sweep_fake(tmp_path, dict(n_slots=2, decode_iteration_ms=4.0), [1, 2], requests=8,
                                     reps=1, prompt=16, output=8)
    assert [g.name for g in results.provenance.host.gpus] == ["NVIDIA H200"] * 2
    assert results.provenance.host.gpus[0].cuda == "13.0"
    for lv in results.lanes[0].levels:
        assert lv.gpu is not None and lv.gpu.samples >= 1
        assert lv.gpu.util_mean_pct == 35.0 and lv.gpu.sm_clock_mean_mhz == 1980.0
        assert lv.gpu.mem_used_peak_bytes == 12 * 2**30 and "gpu" not in lv.unavailable
    lines = [json.loads(ln) for ln in (run_dir / "server_samples.jsonl").read_text().splitlines()]
    assert all(ln["gpu_util_pct"] == 35.0 for ln in lines if ln["kind"] == "process")
    from satbench.pipeline import report as write_report
    from satbench.saturation.recommend import recommend
    from satbench.saturation.recommendations_file import write_recommendations
    write_recommendations(run_dir, recommend(run_dir))
    write_report(run_dir)
    evidence = (run_dir / "EVIDENCE.md").read_text()
    assert "GPU util mean / max %" in evidence and "| 35 / 35 |" in evidence and "NVIDIA H200" in evidence
    png = run_dir / "plots" / "default-gpu.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "plots/default-gpu.png" in evidence


def test_no_gpu_means_no_gpu_plot(tmp_path):
    from satbench.pipeline import report as write_report
    from satbench.saturation.recommend import recommend
    from satbench.saturation.recommendations_file import write_recommendations
    from tests.conftest import sweep_fake

    _, run_dir, _ = sweep_fake(tmp_path, dict(n_slots=2, decode_iteration_ms=4.0), [1, 2], requests=8, reps=1,
                               prompt=16, output=8)
    write_recommendations(run_dir, recommend(run_dir))
    write_report(run_dir)
    assert (run_dir / "plots" / "default-throughput.png").exists()
    assert not (run_dir / "plots" / "default-gpu.png").exists()
