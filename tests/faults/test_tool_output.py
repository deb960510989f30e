"""`llama-server --version` / `--list-devices` is a program's output: read bounded (MAX_TOOL_OUTPUT_BYTES),
bad UTF-8 replaced, and what run.json keeps of it cut (MAX_SERVER_TEXT_CHARS, MAX_DEVICES)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from satbench.capability.node import runtime_build_now
from satbench.config.limits import MAX_DEVICES, MAX_SERVER_TEXT_CHARS, MAX_TOOL_OUTPUT_BYTES
from satbench.config.runtime import runtime_class
from satbench.config.schema import ServerParams
from satbench.server.native import NativeRuntime, list_devices_backend


def _bin(tmp_path: Path, python_body: str) -> str:
    """A fake llama-server: a Python script writing `python_body`'s bytes (sys.argv available)."""
    script = tmp_path / "llama-server"
    script.write_text(f"#!/usr/bin/env python3\nimport sys\nout = sys.stdout.buffer\n{python_body}\n")
    script.chmod(0o755)
    return str(script)


def _lane(server_bin: str) -> SimpleNamespace:
    """A native lane: its runtime is the real native kind, unvalidated (no model file needed)."""
    return SimpleNamespace(runtime=runtime_class("native").model_construct(server_bin=server_bin))


def test_invalid_utf8_in_version_output_is_no_error(tmp_path):
    b = _bin(tmp_path, r"out.write(b'\xff\xfe\x80 garbage\nversion: 11549 (1a2b3c4)\nbuilt with \xc3\x28\n')")
    assert runtime_build_now(_lane(b)) == "11549"
    b = _bin(tmp_path, r"out.write(b'\xff\nversion: 0 (unknown \xff)\n')")
    assert runtime_build_now(_lane(b)) == "version: 0 (unknown \ufffd)"


def test_both_version_formats_name_the_build(tmp_path):
    """llama.cpp's newer `--version` says "version: 0.6.0-dev (build 11434, commit unknown)"; a run
    recorded as build 11434 must match it, or capability refuses a lane measured on this very binary."""
    b = _bin(tmp_path, r"out.write(b'version: 0.6.0-dev (build 11434, commit unknown)\nbuilt with GNU\n')")
    assert runtime_build_now(_lane(b)) == "11434"
    b = _bin(tmp_path, r"out.write(b'version: 0.6.0-dev (build 0, commit unknown)\n')")
    assert runtime_build_now(_lane(b)) == "version: 0.6.0-dev (build 0, commit unknown)"


def test_endless_version_output_is_no_build_and_no_hang(tmp_path):
    b = _bin(tmp_path, f"out.write(b'version: 1 ' + b'x' * {2 * MAX_TOOL_OUTPUT_BYTES})")
    assert runtime_build_now(_lane(b)) is None


def test_a_version_line_kept_in_run_json_is_cut(tmp_path):
    b = _bin(tmp_path, f"out.write(b'version: 0 ' + b'v' * {MAX_TOOL_OUTPUT_BYTES // 2} + b'\\n')")
    _, version = NativeRuntime(b, "m.gguf", ServerParams(), 1, 256, tmp_path / "log").name_and_version()
    assert version is not None and version.startswith("version: 0 vvv")
    assert len(version) == MAX_SERVER_TEXT_CHARS
    assert runtime_build_now(_lane(b)) == version


def test_devices_are_cut_in_number_and_length(tmp_path):
    b = _bin(tmp_path, "out.write(b'Available devices:\\n'"
                       " + b''.join(b'  CUDA%d: ' % i + b'G' * 5000 + b'\\n' for i in range(200)))")
    backend = list_devices_backend(b)
    assert backend is not None and backend.startswith("CUDA0: GGG") and len(backend) <= MAX_SERVER_TEXT_CHARS
    b = _bin(tmp_path, "out.write(b'Available devices:\\n' + b''.join(b'  CUDA%d: H200 \\xff\\n' % i"
                       " for i in range(200)))")
    devices = list_devices_backend(b).split("; ")
    assert len(devices) == MAX_DEVICES and devices[0] == "CUDA0: H200 \ufffd"
