"""What a GGUF file says it is: architecture, name, parameter count, file type, trained context,
experts, and satbench's synthetic marker, read from its header alone.

The key-value section is walked with every array skipped unread (a 262,144-token vocabulary costs a
few seeks), then the tensor infos (name, dimensions, type, offset) are walked for the parameter count
when `general.parameter_count` is absent and for the predominant tensor type when
`general.file_type` is. The tensor data, which makes a model many GB, is never read. Every length
and count the header claims is bounded (gguf/files: MAX_KEY_BYTES, MAX_VALUE_BYTES, MAX_KEYS,
MAX_TENSORS, MAX_ARRAY_ITEMS), so a truncated, corrupt or crafted header is one ModelError, never a
MemoryError or a traceback.
"""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf

from satbench.errors import ModelError
from satbench.gguf.files import (
    _GGUF_SCALARS,
    _GGUF_STRING,
    MAX_KEY_BYTES,
    _Header,
    counts,
)
from satbench.gguf.synthetic_meta import SYNTHETIC_KEY

GGML_MAX_DIMS = 4  # llama.cpp refuses a tensor of more dimensions
MAX_ELEMENTS = (1 << 63) - 1  # llama.cpp refuses a tensor whose element count overflows int64
_GENERAL = ("general.architecture", "general.name", "general.parameter_count", "general.file_type",
            SYNTHETIC_KEY)
_PER_ARCH = ("context_length", "expert_count", "expert_used_count")  # read as {architecture}.KEY
_INTEGER_TYPES = frozenset({0, 1, 2, 3, 4, 5, 10, 11})  # GGUF's integer value types (not bool, float)
MAX_KEPT_KEY_CHARS = 256  # an {architecture}.KEY candidate longer than this is no architecture's key
MAX_KEPT_KEYS = 1024  # candidates kept before general.architecture is known

@dataclass(frozen=True)
class ModelHeader:
    """What a GGUF header says of its model; None where it does not say (or says it in another type)."""

    architecture: str | None
    name: str | None
    parameter_count: int | None
    file_type: str | None
    context_length: int | None
    expert_count: int | None
    expert_used_count: int | None
    synthetic: bool


def file_type_name(value: int) -> str:
    """general.file_type → llama.cpp's name for it without its prefix: 15 → "Q4_K_M", 7 → "Q8_0",
    0 → "F32"; a value this satbench's gguf package does not know → "file type N". llama.cpp's
    "guessed" bit (1024) adds " (guessed)"."""
    guessed = value & int(gguf.LlamaFileType.GUESSED)
    try:
        name = gguf.LlamaFileType(value & ~guessed).name.removeprefix("MOSTLY_").removeprefix("ALL_")
    except ValueError:
        name = f"file type {value & ~guessed}"
    return name + (" (guessed)" if guessed else "")


def _tensor_type_name(value: int) -> str:
    try:
        return gguf.GGMLQuantizationType(value).name
    except ValueError:
        return f"type {value}"


def _integer(values: dict[str, tuple[int, Any]], key: str) -> int | None:
    """An integer value that is a count (>= 0); None when absent, of another type, or negative."""
    vtype, value = values.get(key, (None, None))
    return value if vtype in _INTEGER_TYPES and isinstance(value, int) and value >= 0 else None


def _text(values: dict[str, tuple[int, Any]], key: str) -> str | None:
    vtype, value = values.get(key, (None, None))
    return value if vtype == _GGUF_STRING and isinstance(value, str) else None


def _read(h: _Header) -> ModelHeader:
    n_tensors, n_keys = counts(h)
    wanted_suffixes = tuple("." + k for k in _PER_ARCH)
    values: dict[str, tuple[int, Any]] = {}  # key → (GGUF value type, value)
    for _ in range(n_keys):
        key, vtype = h.string(MAX_KEY_BYTES), h.unpack("I")
        # the architecture's own keys may come before general.architecture: keep every candidate
        candidate = key in _GENERAL or (key.endswith(wanted_suffixes) and len(key) <= MAX_KEPT_KEY_CHARS
                                        and len(values) < MAX_KEPT_KEYS)
        if candidate and vtype in _GGUF_SCALARS:
            values[key] = (vtype, h.unpack(_GGUF_SCALARS[vtype]))
        elif key in _GENERAL and vtype == _GGUF_STRING:
            values[key] = (vtype, h.string())
        else:
            h.skip_value(vtype)
    n_params = 0
    elements_by_type: dict[int, int] = {}
    for _ in range(n_tensors):
        h.skip(h.unpack("Q"))  # the name, unread (bounded by the file, not allocated)
        n_dims = h.unpack("I")
        if n_dims > GGML_MAX_DIMS:
            raise ValueError(f"a tensor of {n_dims} dimensions (llama.cpp loads at most {GGML_MAX_DIMS})")
        elements = math.prod(h.unpack("Q") for _ in range(n_dims))
        if elements > MAX_ELEMENTS:
            raise ValueError("a tensor whose element count overflows 64 bits")
        ttype = h.unpack("I")
        h.skip(8)  # its data's offset
        n_params += elements
        if n_dims >= 2:  # matrices: the vectors (norms, biases) stay F32 in every quantization
            elements_by_type[ttype] = elements_by_type.get(ttype, 0) + elements
    architecture = _text(values, "general.architecture")
    per_arch = {k: None if architecture is None else _integer(values, f"{architecture}.{k}")
                for k in _PER_ARCH}
    file_type = _integer(values, "general.file_type")
    if file_type is not None:
        ftype: str | None = file_type_name(file_type)
    elif elements_by_type:
        most = max(elements_by_type, key=lambda t: (elements_by_type[t], -t))  # a tie: the lower type
        ftype = _tensor_type_name(most) + " (guessed)"
    else:
        ftype = None
    stated = _integer(values, "general.parameter_count")
    return ModelHeader(
        architecture=architecture, name=_text(values, "general.name"),
        parameter_count=stated if stated else (n_params if n_tensors else None), file_type=ftype,
        context_length=per_arch["context_length"], expert_count=per_arch["expert_count"],
        expert_used_count=per_arch["expert_used_count"],
        synthetic=values.get(SYNTHETIC_KEY, (None, False))[1] is True)


def read_model_header(path: str | os.PathLike[str]) -> ModelHeader:
    """The model a GGUF file describes, from its header alone (the tensor data is never read).
    ModelError, in one line, when the file cannot be read, is not GGUF v2/v3, or its header is
    truncated, corrupt or claims more than satbench reads."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            return _read(_Header(fh, os.fstat(fh.fileno()).st_size))
    except (OSError, ValueError, EOFError, struct.error) as exc:  # UnicodeDecodeError is a ValueError
        raise ModelError(f"cannot read the header of GGUF {path} (truncated or corrupt? {exc})") from exc
