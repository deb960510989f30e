"""The model-hash cache: a digest is reused only while the file is unchanged, one computed while
writing a synthetic model is reused by the sweep, and entries of vanished files are dropped."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from satbench.gguf.files import HASH_CACHE, remember_sha256, sha256_file
from satbench.gguf.synthetic import write_synthetic_gguf


def test_a_remembered_digest_is_used_until_the_file_is_rewritten(tmp_path: Path) -> None:
    cache = tmp_path / "cache.json"
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF one")
    remember_sha256(model, "f" * 64, cache)
    assert sha256_file(model, cache) == "f" * 64  # the file was not read again
    st = model.stat()
    model.write_bytes(b"GGUF two")  # same size; mtime put back, as `touch -d` could
    os.utime(model, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert sha256_file(model, cache) == hashlib.sha256(b"GGUF two").hexdigest()  # ctime gave it away


def test_entries_of_files_that_are_gone_are_dropped(tmp_path: Path) -> None:
    cache = tmp_path / "cache.json"
    keep, gone = tmp_path / "keep.gguf", tmp_path / "gone.gguf"
    keep.write_bytes(b"GGUF keep")
    gone.write_bytes(b"GGUF gone")
    sha256_file(gone, cache)
    gone.unlink()
    sha256_file(keep, cache)
    entries = json.loads(cache.read_text())
    assert len(entries) == 1 and next(iter(entries)).startswith(str(keep.resolve()) + "|")


def test_models_make_leaves_its_digest_for_the_sweep(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # the default cache is ./.satbench/sha256-cache.json
    info = write_synthetic_gguf(tmp_path / "m.gguf", "llama", "tiny", 3)
    assert list(json.loads(HASH_CACHE.read_text()).values()) == [info.sha256]  # before anyone hashed it
    assert info.sha256 == sha256_file(info.path, cache=None) == sha256_file(info.path)
