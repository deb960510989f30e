"""Model files: check they are GGUF, hash them (with a cache keyed by path, size and mtime)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from satbench.errors import ModelError

GGUF_MAGIC = b"GGUF"
HASH_CACHE = Path(".satbench") / "sha256-cache.json"


def check_gguf(path: Path) -> None:
    """ModelError unless `path` is a readable file that starts with the GGUF magic."""
    if not path.exists():
        raise ModelError(f"model file {path} does not exist")
    if not path.is_file():
        raise ModelError(f"model path {path} is not a file")
    try:
        with path.open("rb") as fh:
            magic = fh.read(4)
    except OSError as exc:
        raise ModelError(f"model file {path} cannot be read: {exc.strerror}") from exc
    if magic != GGUF_MAGIC:
        raise ModelError(f"model file {path} is not a GGUF file (starts with {magic!r})")


def sha256_file(path: Path, cache: Path | None = HASH_CACHE) -> str:
    """sha256 of the file; reuses a cached digest while path, size and mtime are unchanged."""
    st = path.stat()
    key = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    entries: dict[str, str] = {}
    if cache is not None and cache.exists():
        try:
            entries = json.loads(cache.read_text())
        except (OSError, ValueError):
            entries = {}
        if key in entries:
            return entries[key]
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(4 * 1024 * 1024), b""):
            h.update(block)
    digest = h.hexdigest()
    if cache is not None:
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            entries[key] = digest
            tmp = cache.with_suffix(".tmp")
            tmp.write_text(json.dumps(entries, indent=1))
            os.replace(tmp, cache)
        except OSError:
            pass  # the cache is an optimisation; a read-only directory only costs time
    return digest
