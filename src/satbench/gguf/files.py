"""Model files: check they are GGUF, hash them (with a cache keyed by path, size, mtime, ctime and
inode), read a few keys of their header."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import struct
import tempfile
import time
from pathlib import Path
from typing import Any, BinaryIO

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


STALE_PARTIAL_S = 600.0


def remove_stale_partials(target: Path, older_than_s: float = STALE_PARTIAL_S) -> list[Path]:
    """Delete the hidden partial files (`.NAME.*.tmp` beside `target`) that an assembly or a
    synthetic write killed outright (SIGKILL, power loss) left behind, and return them. Only files
    untouched for `older_than_s` go: a writer that is still at work rewrites its file continuously."""
    removed: list[Path] = []
    now_s = time.time()
    for tmp in target.parent.glob(f".{glob.escape(target.name)}.*.tmp"):
        try:
            if tmp.is_file() and now_s - tmp.stat().st_mtime >= older_than_s:
                tmp.unlink()
                removed.append(tmp)
        except OSError:
            continue  # gone meanwhile, or not ours to delete: it stays
    return removed


def _key(path: Path) -> str:
    """The cache key: the resolved path with size, mtime, ctime and inode. Rewriting a file in
    place changes its ctime, which no user can set back, so a stale digest is never reused."""
    st = path.stat()
    return f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}|{st.st_ino}"


def _read_cache(cache: Path) -> dict[str, str]:
    try:
        entries = json.loads(cache.read_text())
    except (OSError, ValueError, RecursionError):
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
        # a fresh file beside the cache: a link left at any fixed name is never written through
        fd, tmp_name = tempfile.mkstemp(".tmp", f".{cache.name}.", cache.parent)
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(json.dumps(entries, indent=1))
            os.replace(tmp_name, cache)
        finally:
            Path(tmp_name).unlink(missing_ok=True)
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


_GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_GGUF_STRING, _GGUF_ARRAY = 8, 9
_GGUF_MAX_NESTING = 16  # arrays of arrays: llama.cpp writes none; the format allows some
_BLOCK = 1 << 20
# What a header may claim before it is called corrupt: far above any model's (a 262,144-token
# vocabulary; a few thousand tensors), far below what would make the reader allocate gigabytes or loop
# for minutes on a crafted file. A key is at most 65,535 bytes (the GGUF spec); a string value read
# (not skipped) at most 64 KiB.
MAX_KEY_BYTES = 65_535
MAX_VALUE_BYTES = 64 << 10
MAX_KEYS = 1 << 20
MAX_TENSORS = 1 << 20
MAX_ARRAY_ITEMS = 1 << 24  # items of an array of strings (or of arrays), each walked one by one


class _Header:
    """Sequential reads of a GGUF header that never pass the end of the file (EOFError)."""

    def __init__(self, fh: BinaryIO, size: int, order: str = "<") -> None:
        self.fh, self.size, self.order = fh, size, order

    def take(self, n: int) -> bytes:
        if n > self.size - self.fh.tell():
            raise EOFError("the file ends inside its header")
        return self.fh.read(n)

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(self.order + fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self, limit: int = MAX_VALUE_BYTES) -> str:
        """A length-prefixed UTF-8 string; ValueError when it claims more than `limit` bytes (a
        corrupt length is refused before anything is allocated for it)."""
        n = self.unpack("Q")
        if n > limit:
            raise ValueError(f"a string of {n} bytes, more than the {limit} satbench reads")
        return self.take(n).decode("utf-8")

    def count(self, what: str, limit: int) -> int:
        """An unsigned 64-bit count; ValueError when it is above `limit`."""
        n = self.unpack("Q")
        if n > limit:
            raise ValueError(f"{n} {what}, more than the {limit} satbench reads")
        return int(n)

    def skip_value(self, vtype: int, depth: int = 0) -> None:
        if vtype == _GGUF_ARRAY:
            if depth >= _GGUF_MAX_NESTING:  # a crafted file must not exhaust Python's stack
                raise ValueError(f"arrays nested more than {_GGUF_MAX_NESTING} deep")
            etype, count = self.unpack("I"), self.unpack("Q")
            if count > MAX_ARRAY_ITEMS and etype in (_GGUF_STRING, _GGUF_ARRAY):
                raise ValueError(f"an array of {count} items, more than the {MAX_ARRAY_ITEMS} satbench reads")
            if etype == _GGUF_STRING:
                self.skip_strings(count)
            elif etype in _GGUF_SCALARS:
                self.skip(count * struct.calcsize(_GGUF_SCALARS[etype]))
            elif etype == _GGUF_ARRAY:  # nested arrays: allowed by the format, unused by llama.cpp
                for _ in range(count):
                    self.skip_value(_GGUF_ARRAY, depth + 1)
            else:
                raise ValueError(f"unknown GGUF array element type {etype}")
        elif vtype == _GGUF_STRING:
            self.skip(self.unpack("Q"))
        elif vtype in _GGUF_SCALARS:
            self.skip(struct.calcsize(_GGUF_SCALARS[vtype]))
        else:
            raise ValueError(f"unknown GGUF value type {vtype}")

    def skip(self, n: int) -> None:
        if n > self.size - self.fh.tell():
            raise EOFError("the file ends inside its header")
        self.fh.seek(n, os.SEEK_CUR)

    def skip_strings(self, count: int) -> None:
        """Walk `count` length-prefixed strings through 1 MiB blocks, reading only their lengths."""
        pos = start = self.fh.tell()
        buf = b""
        for _ in range(count):
            if pos - start + 8 > len(buf):
                self.fh.seek(pos)
                start, buf = pos, self.fh.read(_BLOCK)
            if pos - start + 8 > len(buf):
                raise EOFError("the file ends inside its header")
            pos += 8 + struct.unpack_from(self.order + "Q", buf, pos - start)[0]
            if pos > self.size:
                raise EOFError("the file ends inside its header")
        self.fh.seek(pos)


def counts(h: _Header) -> tuple[int, int]:
    """Read a GGUF file's preamble (magic, version, tensor count, key count) from `h`, leaving it at
    the first key; (tensors, keys), each bounded (MAX_TENSORS, MAX_KEYS). ValueError when it is not
    GGUF v2 or v3; `h.order` follows the file."""
    if h.take(4) != GGUF_MAGIC:
        raise ValueError("GGUF magic invalid")
    version = h.unpack("I")
    if version & 0xFFFF == 0:  # a big-endian file: its version reads byte-swapped
        h.order, version = ">", int.from_bytes(version.to_bytes(4, "little"), "big")
    if version not in (2, 3):  # v1 laid its counts out otherwise
        raise ValueError(f"GGUF version {version} is not supported (2 or 3)")
    return h.count("tensors", MAX_TENSORS), h.count("keys", MAX_KEYS)


def key_count(h: _Header) -> int:
    """The number of keys (counts(), leaving `h` at the first key)."""
    return counts(h)[1]


def read_gguf_keys(path: Path, keys: frozenset[str],
                   stop_after: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The scalar and string values of `keys` in a GGUF file's key-value section, read without
    decoding its arrays (a 262,144-token vocabulary is skipped, not parsed). Stops at the end of
    the section, or as soon as every key of `stop_after` has been seen. ModelError when the file
    cannot be read, is not GGUF, or is truncated or corrupt inside what is read."""
    try:
        with open(path, "rb") as fh:
            h = _Header(fh, os.fstat(fh.fileno()).st_size)
            out: dict[str, Any] = {}
            seen: set[str] = set()
            for _ in range(key_count(h)):
                key, vtype = h.string(MAX_KEY_BYTES), h.unpack("I")
                seen.add(key)
                if key in keys and vtype in _GGUF_SCALARS:
                    out[key] = h.unpack(_GGUF_SCALARS[vtype])
                elif key in keys and vtype == _GGUF_STRING:
                    out[key] = h.string()
                else:
                    h.skip_value(vtype)
                if stop_after and stop_after <= seen:
                    break
            return out
    except (OSError, ValueError, EOFError, struct.error) as exc:
        raise ModelError(f"cannot read GGUF {path} (truncated or corrupt? {exc})") from exc
