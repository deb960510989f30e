"""What marks a GGUF file as satbench's synthetic model, and the checks on the file it is written to.

The metadata keys (`satbench.synthetic`, `satbench.seed`, `satbench.size` and, when the table
was overridden, `satbench.dims`), the model's general.name, the `SyntheticModelInfo` a write
returns, and the refusals before a byte is written: a path that is no FILE.gguf, or an existing
file satbench did not write. gguf/synthetic writes the weights.
"""

from __future__ import annotations

import os
from dataclasses import fields
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from satbench.errors import ModelError
from satbench.gguf.files import read_gguf_keys
from satbench.gguf.shapes import Dims

SYNTHETIC_KEY = "satbench.synthetic"
SEED_KEY = "satbench.seed"
SIZE_KEY = "satbench.size"
DIMS_KEY = "satbench.dims"  # the dimensions that differ from the size's table, when any do
_METADATA_KEYS = frozenset({SYNTHETIC_KEY, SEED_KEY, SIZE_KEY, "general.architecture", "general.name"})


class SyntheticModelInfo(BaseModel):
    """What :func:`write_synthetic_gguf` wrote."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: Path
    arch: str
    size: str
    seed: int
    n_vocab: int
    dims: str | None = None  # the dimensions that differ from the size's table ("head_dim=64,...")
    n_params: int
    file_bytes: int
    sha256: str


def dims_changed(table: Dims, d: Dims) -> str | None:
    """The fields of `d` that differ from the size's `table`, except the vocabulary (which has a
    name suffix of its own), as "name=value,..." (lists joined by ':'); None when none do."""
    diff = [f"{f.name}={':'.join(map(str, v)) if isinstance(v, tuple) else v}"
            for f in fields(d) if f.name != "n_vocab" and (v := getattr(d, f.name)) != getattr(table, f.name)]
    return ",".join(diff) or None


def model_name(arch: str, size: str, table: Dims, d: Dims) -> str:
    """general.name: the (arch, size), with "-vocabN" and "-dims" when the table was overridden."""
    name = f"satbench-synthetic-{arch}-{size}"
    if d.n_vocab != table.n_vocab:
        name += f"-vocab{d.n_vocab}"
    return name + ("-dims" if dims_changed(table, d) else "")


def output_path(path: str | os.PathLike[str]) -> Path:
    """The file to write, checked before a byte is written: ModelError for an empty path, an
    existing directory, or a name that does not end in .gguf."""
    if not os.fspath(path):
        raise ModelError("no output file given: expected FILE.gguf")
    target = Path(path)
    if target.is_dir():
        raise ModelError(f"cannot write synthetic model to {target}: it is a directory (expected FILE.gguf)")
    if target.suffix.lower() != ".gguf":
        raise ModelError(f"cannot write synthetic model to {target}: the name must end in .gguf")
    return target


def refuse_to_replace(path: str | os.PathLike[str], fix: str = "use --force to replace it") -> None:
    """ModelError when a file exists at ``path`` that is not a synthetic GGUF written by satbench
    (a real model, or anything else): satbench replaces only its own files (`models make` unless
    forced)."""
    target = Path(path)
    if not target.is_file():
        return
    try:
        synthetic = is_synthetic_gguf(target)
    except ModelError:
        synthetic = False
    if not synthetic:
        raise ModelError(f"{target} exists and is not a synthetic model written by satbench; "
                         f"not replacing it ({fix})")


def read_synthetic_metadata(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The ``satbench.*`` keys of a GGUF file (with its architecture and name), or None if it is not
    synthetic. Reads the header only, up to the satbench keys (written before the vocabulary)."""
    meta = read_gguf_keys(Path(path), _METADATA_KEYS | {DIMS_KEY}, stop_after=_METADATA_KEYS)
    return meta if meta.get(SYNTHETIC_KEY) else None


def is_synthetic_gguf(path: str | os.PathLike[str]) -> bool:
    """True when the GGUF at ``path`` was written by :func:`write_synthetic_gguf`."""
    return read_synthetic_metadata(path) is not None
