from __future__ import annotations

import stat
from pathlib import Path

import pytest

from satbench.gguf.synthetic import write_synthetic_gguf


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory):
    """A model file for the native runtime (the stand-in llama-server never reads it)."""
    path = tmp_path_factory.mktemp("model") / "tiny.gguf"
    write_synthetic_gguf(path, "llama", "tiny", 1)
    return path


@pytest.fixture
def marker_bin(tmp_path: Path) -> tuple[str, Path]:
    """A server_bin that leaves a file behind whenever it is run: it must never be."""
    marker = tmp_path / "started"
    script = tmp_path / "llama-server"
    script.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script), marker
