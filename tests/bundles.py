"""The committed evidence bundles, as tests read them: copied, their gzipped raw files unpacked."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path


def unpacked_copy(bundle: Path, copy: Path) -> Path:
    """`bundle` copied to `copy` with every gzipped raw file restored (SHA256SUMS holds their
    uncompressed hashes); the committed bundle is never touched."""
    shutil.copytree(bundle, copy)
    for packed in copy.glob("*.gz"):
        packed.with_suffix("").write_bytes(gzip.decompress(packed.read_bytes()))
        packed.unlink()
    return copy
