"""The native backend names the devices, not their free memory (which changes between calls), and
`llama-server --list-devices` (a CUDA initialisation each) runs once per binary, not per call (D5)."""

from __future__ import annotations

from pathlib import Path

from satbench.config.schema import ServerParams
from satbench.server.native import NativeRuntime


def _fake_bin(tmp_path: Path) -> tuple[Path, Path]:
    calls = tmp_path / "calls"
    script = tmp_path / "llama-server"
    script.write_text(f"""#!/bin/sh
if [ "$1" = "--list-devices" ]; then
  echo x >> {calls}
  n=$(wc -l < {calls})
  echo "Available devices:"
  echo "  CUDA0: NVIDIA H200 (143156 MiB, $((140000 + n)) MiB free)"
  echo "  CUDA1: NVIDIA H200 (143156 MiB, $((139000 + n)) MiB free)"
  exit 0
fi
exit 1
""")
    script.chmod(0o755)
    return script, calls


def _runtime(bin_path: Path, tmp_path: Path) -> NativeRuntime:
    return NativeRuntime(str(bin_path), "m.gguf", ServerParams(), 1, 256, tmp_path / "log")


def test_backend_has_no_free_memory_figure_and_is_asked_once_per_binary(tmp_path):
    script, calls = _fake_bin(tmp_path)
    first, second = _runtime(script, tmp_path), _runtime(script, tmp_path)  # e.g. solo and together
    backends = {first.backend(), first.backend(), second.backend(), second.backend()}
    assert backends == {"CUDA0: NVIDIA H200; CUDA1: NVIDIA H200"}
    assert calls.read_text().count("x") == 1
