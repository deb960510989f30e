from __future__ import annotations

import pytest

from satbench.models.synthetic import write_synthetic_gguf


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory):
    """A model file for the native runtime (the stand-in llama-server never reads it)."""
    path = tmp_path_factory.mktemp("model") / "tiny.gguf"
    write_synthetic_gguf(path, "llama", "tiny", 1)
    return path
