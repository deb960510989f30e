"""GPU figures through a fake NVML: described in provenance, sampled per level, absent = unavailable."""

from types import SimpleNamespace

from satbench.events import ProcessSample
from satbench.gpu import NvmlGpus, open_nvml
from satbench.hardware import describe_host
from satbench.metrics.memory import peak_gpu_mem_bytes


class FakeNvml:
    def __init__(self):
        self.used = [10 * 2**30, 2 * 2**30]

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
    samples = [ProcessSample(lane="l", t_ns=t, gpu_mem_used_bytes=v) for t, v in [(0, 5), (10, 9), (20, 7), (30, 1)]]
    assert peak_gpu_mem_bytes(samples, 5, 25) == 9
