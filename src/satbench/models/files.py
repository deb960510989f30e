"""Model files: check they are GGUF, hash them (with a cache keyed by path, size, mtime, ctime and
inode)."""

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


def _key(path: Path) -> str:
    """The cache key: the resolved path with size, mtime, ctime and inode. Rewriting a file in
    place changes its ctime, which no user can set back, so a stale digest is never reused."""
    st = path.stat()
    return f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}|{st.st_ino}"


def _read_cache(cache: Path) -> dict[str, str]:
    try:
        entries = json.loads(cache.read_text())
    except (OSError, ValueError):
        return {}
    return entries if isinstance(entries, dict) else {}


def _still_valid(key: str) -> bool:
    path = Path(key.split("|", 1)[0])
    try:
        return _key(path) == key
    except OSError:
        return False


def _store(cache: Path, path: Path, digest: str) -> None:
    """Add one digest, dropping entries whose file is gone or changed (the cache never grows
    past the model files that exist)."""
    try:
        entries = {k: v for k, v in _read_cache(cache).items() if _still_valid(k)}
        entries[_key(path)] = digest
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(".tmp")
        tmp.write_text(json.dumps(entries, indent=1))
        os.replace(tmp, cache)
    except OSError:
        pass  # the cache is an optimisation; a read-only directory only costs time


def sha256_file(path: Path, cache: Path | None = HASH_CACHE) -> str:
    """sha256 of the file; reuses a cached digest while the file is unchanged (see `_key`)."""
    if cache is not None and (hit := _read_cache(cache).get(_key(path))) is not None:
        return hit
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(4 * 1024 * 1024), b""):
            h.update(block)
    digest = h.hexdigest()
    if cache is not None:
        _store(cache, path, digest)
    return digest


def remember_sha256(path: Path, digest: str, cache: Path = HASH_CACHE) -> None:
    """Record a digest computed while writing the file (`models make`), so that the sweep and
    the capability report do not read a multi-GB model again to hash it."""
    _store(cache, path, digest)
