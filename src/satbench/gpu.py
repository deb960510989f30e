"""GPU facts through NVML (`nvidia-ml-py`), when present. Narrow: describe() and memory_used().

Without the package, a driver or a GPU, `open_nvml()` returns None and every GPU figure is
reported as unavailable, never as zero.
"""

from __future__ import annotations

from typing import Any

from satbench.manifest import GpuInfo


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
        except Exception:  # noqa: BLE001 - older drivers lack it; the figure is optional
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


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def open_nvml() -> NvmlGpus | None:
    """NVML when the package, the driver and at least one GPU are there; else None."""
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
        if pynvml.nvmlDeviceGetCount() == 0:
            return None
        return NvmlGpus(pynvml)
    except Exception:  # noqa: BLE001 - any NVML failure means "no GPU figures", by design
        return None
