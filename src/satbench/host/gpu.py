"""GPU facts through NVML (`nvidia-ml-py`), when present. Narrow: describe() and reading().

Without the package, a driver or a GPU, `open_nvml()` returns None and every GPU figure is
reported as unavailable, never as zero.

A reading is device-wide (every process on the GPU, not only the server): memory used is summed
over the visible devices; utilisation and SM clock are those of the busiest device, the one the
server's work lands on when a single GPU serves it. NVML's utilisation is the share of its last
sample period (1/6 s to 1 s, driver-defined) in which a kernel ran, in percent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from satbench.records.manifest import GpuInfo

NVML_CLOCK_SM = 1  # pynvml.NVML_CLOCK_SM


@dataclass(frozen=True)
class GpuReading:
    mem_used_bytes: int
    util_pct: float | None
    sm_clock_mhz: float | None


class NvmlGpus:
    """Every visible NVIDIA GPU; memory used is summed over devices (device-wide, all processes)."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]

    def describe(self) -> list[GpuInfo]:
        nv = self._nvml
        driver = _text(nv.nvmlSystemGetDriverVersion())
        try:
            cuda_int = nv.nvmlSystemGetCudaDriverVersion_v2()
            cuda = f"{cuda_int // 1000}.{(cuda_int % 1000) // 10}"
        except Exception:
            cuda = None
        return [
            GpuInfo(
                name=_text(nv.nvmlDeviceGetName(h)),
                memory_total_bytes=int(nv.nvmlDeviceGetMemoryInfo(h).total),
                driver=driver,
                cuda=cuda,
            )
            for h in self._handles
        ]

    def memory_used_bytes(self) -> int:
        return sum(int(self._nvml.nvmlDeviceGetMemoryInfo(h).used) for h in self._handles)

    @property
    def count(self) -> int:
        return len(self._handles)

    def memory_free_bytes(self) -> int:
        """Free memory, summed over the visible devices (device-wide: what every process left)."""
        return sum(int(self._nvml.nvmlDeviceGetMemoryInfo(h).free) for h in self._handles)

    def reading(self) -> GpuReading:
        """Memory used (all devices), and utilisation and SM clock of the busiest device. A device
        that cannot report utilisation or clocks (some vGPU and MIG setups) leaves them None."""
        nv = self._nvml
        busiest: tuple[float, float | None] | None = None
        for h in self._handles:
            try:
                util = float(nv.nvmlDeviceGetUtilizationRates(h).gpu)
            except Exception:
                continue
            try:
                clock: float | None = float(nv.nvmlDeviceGetClockInfo(h, NVML_CLOCK_SM))
            except Exception:
                clock = None
            if busiest is None or util > busiest[0]:
                busiest = (util, clock)
        return GpuReading(mem_used_bytes=self.memory_used_bytes(),
                          util_pct=busiest[0] if busiest else None,
                          sm_clock_mhz=busiest[1] if busiest else None)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def open_nvml() -> NvmlGpus | None:
    """NVML when the package, the driver and at least one GPU are there; else None."""
    try:
        import pynvml

        pynvml.nvmlInit()
        if pynvml.nvmlDeviceGetCount() == 0:
            return None
        return NvmlGpus(pynvml)
    except Exception:
        return None
