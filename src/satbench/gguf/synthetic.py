"""Random-weight GGUF models that real llama.cpp loads and generates from.

A synthetic model costs no download and no licence, yet makes the server do real work. The
shapes live in :mod:`satbench.gguf.shapes` (one table of hyper-parameters per architecture
and size, tensor names from the ``gguf`` package), the vocabulary in
:mod:`satbench.gguf.vocab`, the metadata keys and the checks on the target file in
:mod:`satbench.gguf.synthetic_meta`; this module fills and writes the weights.

Random output must stay valid UTF-8, or the server holds bytes back and merges stream chunks.
Every non-byte piece is ASCII, and the weights keep a "bias channel": residual dimension 0 holds
a constant that no layer writes to, so the output row of every token that must never be
generated (``<unk>``, ``<s>``, non-printable or non-ASCII byte tokens) scores far below the rest.
The byte tokens still exist, so any prompt text tokenizes through byte fallback.

Billions of parameters are written in seconds: the weights are one stream of standard normals
read in file order, drawn once from the seed into a pool of at most :data:`POOL_SIZE` values
(a prime, so no two rows of a matrix repeat) that the stream wraps around, cast to F16 once per
scale. Tensors the bias channel leaves alone go to the file straight from views of the pool;
the others are assembled one at a time in a scratch buffer, so memory stays near the largest
tensor whatever the model's size. Same arguments, same bytes.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from math import prod
from pathlib import Path
from typing import IO

import gguf
import numpy as np
import psutil

from satbench.errors import ModelError
from satbench.gguf import deepseek4
from satbench.gguf.files import remember_sha256, remove_stale_partials
from satbench.gguf.shapes import (
    ARCHS,
    ArchSpec,
    Dims,
    TensorKind,
    TensorSpec,
    parameter_count,
    spec_for,
    tensor_list,
    tensor_name,
)
from satbench.gguf.synthetic_meta import (
    DIMS_KEY,
    SEED_KEY,
    SIZE_KEY,
    SYNTHETIC_KEY,
    SyntheticModelInfo,
    dims_changed,
    model_name,
    output_path,
)
from satbench.gguf.vocab import (
    BYTE_BASE,
    N_VOCAB,
    add_tokenizer,
    build_vocab,
    suppressed_token_ids,
)

__all__ = [
    "ARCHS", "BYTE_BASE", "N_VOCAB", "POOL_SIZE", "build_vocab", "parameter_count", "suppressed_token_ids",
    "write_synthetic_gguf",
]

_T = gguf.MODEL_TENSOR
_Q = gguf.GGMLQuantizationType
POOL_SIZE = 15_485_863  # the millionth prime: 31 MB of F16 per scale
_WEIGHT_STD = 0.02
_OUTPUT_STD = 0.05
_SUPPRESS = 2.0  # minus the bias-channel weight of a token that must not be generated
_RESIDUAL_WRITERS: frozenset[TensorKind] = frozenset(
    {_T.ATTN_OUT, _T.FFN_DOWN, _T.FFN_DOWN_EXP, _T.FFN_DOWN_SHEXP, deepseek4.ATTN_OUT_B})
_EDITED = _RESIDUAL_WRITERS | {_T.TOKEN_EMBD, _T.OUTPUT}
_KEEP_F32: frozenset[TensorKind] = frozenset({_T.FFN_GATE_INP, _T.FFN_EXP_PROBS_B}) | deepseek4.F32_MATRICES
_I32 = frozenset({deepseek4.TID2EID})  # token id -> expert ids of a hash-routed layer
MAX_SYNTHETIC_BYTES = 64 << 30  # a synthetic model file; the largest table size (deepseek4 gpu) is 9.1 GB
# memory per value of a tensor built in the scratch buffer: F16 scratch, an F32 copy, Q8_0 output and slack
_BUILD_BYTES_PER_VALUE = 8


class _Pool:
    """The weight stream: ``size`` standard normals from the seed, repeated; one F16 copy per std.

    Each copy holds the pool twice, so any window of up to ``size`` values is a view.
    """

    def __init__(self, seed: int, size: int) -> None:
        self.size = size
        self.pos = 0
        self._normals = np.random.default_rng(seed).standard_normal(size, dtype=np.float32)
        self._scaled: dict[float, np.ndarray] = {}

    def _twice(self, std: float) -> np.ndarray:
        twice = self._scaled.get(std)
        if twice is None:
            twice = np.empty(2 * self.size, dtype=np.float16)
            twice[: self.size] = self._normals * np.float32(std)
            twice[self.size :] = twice[: self.size]
            self._scaled[std] = twice
        return twice

    def take(self, n: int, std: float) -> Iterator[np.ndarray]:
        """The stream's next ``n`` values times ``std``, as F16 views of at most ``size`` each."""
        twice, start = self._twice(std), self.pos % self.size
        self.pos += n
        while n > 0:  # after ``size`` values the stream is back at ``start``
            k = min(n, self.size)
            yield twice[start : start + k]
            n -= k

    def fill(self, out: np.ndarray, std: float) -> None:
        """Fill the contiguous array ``out`` with the stream's next values."""
        flat, done = out.reshape(-1), 0
        for chunk in self.take(flat.size, std):
            flat[done : done + chunk.size] = chunk
            done += chunk.size


def _file_type(
    kind: TensorKind, shape: tuple[int, ...], d: Dims
) -> gguf.GGMLQuantizationType:
    """I32 for expert-id tables, F32 for vectors, routers and small mixers, Q8_0 (sizes marked
    quantized) or F16 for matrices."""
    if kind in _I32:
        return _Q.I32
    if len(shape) == 1 or kind in _KEEP_F32:
        return _Q.F32
    if d.quantized and shape[-1] % 32 == 0:
        return _Q.Q8_0
    return _Q.F16


def _nbytes(shape: tuple[int, ...], qtype: gguf.GGMLQuantizationType) -> int:
    block, type_size = gguf.GGML_QUANT_SIZES[qtype]
    return prod(shape) // block * type_size


def _std(kind: TensorKind) -> float:
    return 1.0 if kind == _T.TOKEN_EMBD else _OUTPUT_STD if kind == _T.OUTPUT else _WEIGHT_STD


def _edit_bias_channel(kind: TensorKind, values: np.ndarray) -> None:
    """Residual dimension 0: a constant in the embeddings (half the squared norm), written by no
    layer, read only by the output rows of suppressed tokens."""
    if kind == _T.TOKEN_EMBD:
        values[:, 0] = np.sqrt(values.shape[1])
    elif kind == _T.OUTPUT:
        values[:, 0] = 0.0
        bad = suppressed_token_ids()
        values[bad, :] = 0.0
        values[bad, 0] = -_SUPPRESS
    elif kind in _RESIDUAL_WRITERS:
        values[..., 0, :] = 0.0  # no layer writes to the bias channel


class _HashedOut:
    """The output file, hashed in a second thread as it is written (hashlib drops the GIL)."""

    def __init__(self, fout: IO[bytes], hasher: ThreadPoolExecutor, head: bytes) -> None:
        self._fout, self._hasher = fout, hasher
        self._sha = hashlib.sha256(head)
        self._pending: list[Future[None]] = []

    def write(self, data: bytes | memoryview) -> None:
        self._fout.write(data)
        self._pending.append(self._hasher.submit(self._sha.update, data))

    def pad(self, alignment: int) -> None:
        self.write(b"\0" * (-self._fout.tell() % alignment))

    def settle(self) -> None:
        """Wait until everything written is hashed, before a written buffer is reused."""
        for future in self._pending:
            future.result()
        self._pending.clear()

    def hexdigest(self) -> str:
        self.settle()
        return self._sha.hexdigest()


def _expert_ids(shape: tuple[int, ...], bid: int, n_expert: int) -> np.ndarray:
    """A hash-routed layer's table (vocabulary × experts used): token t of layer `bid` goes to the
    experts (h + j) mod n_expert, j < experts used, with h = (t · 2654435761 + bid · 40503) mod
    n_expert: distinct experts per token, spread over all of them, the same for every seed."""
    n_vocab, n_used = shape
    h = (np.arange(n_vocab, dtype=np.int64) * 2654435761 + bid * 40503) % n_expert
    return ((h[:, None] + np.arange(n_used)) % n_expert).astype(np.int32)


def _write_tensor(
    out: _HashedOut, spec: TensorSpec, qtype: gguf.GGMLQuantizationType, pool: _Pool,
    scratch: np.ndarray, n_expert: int,
) -> None:
    """One tensor's data: norms are ones, expert-id tables a hash, matrices come from the pool."""
    kind, bid, shape = spec
    if qtype == _Q.I32:
        out.write(_expert_ids(shape, bid or 0, n_expert).tobytes())
        return
    if len(shape) == 1:
        fill = 0.0 if kind == _T.FFN_EXP_PROBS_B else 1.0
        out.write(np.full(shape, fill, dtype=np.float32).tobytes())
        return
    n, std = prod(shape), _std(kind)
    if qtype == _Q.F16 and kind not in _EDITED:
        for chunk in pool.take(n, std):
            out.write(chunk.data)
        return
    out.settle()
    values = scratch[:n].reshape(shape)
    pool.fill(values, std)
    _edit_bias_channel(kind, values)
    if qtype == _Q.F16:
        out.write(values.data)
    elif qtype == _Q.Q8_0:
        out.write(gguf.quants.quantize(values.astype(np.float32), qtype).data)
    else:
        out.write(values.astype(np.float32).data)


def _write_data(
    fout: IO[bytes], tmp: Path, tensors: list[tuple[TensorSpec, gguf.GGMLQuantizationType]],
    seed: int, alignment: int, n_expert: int,
) -> str:
    """Every tensor's data after the header; returns the sha256 of the whole file."""
    fout.flush()
    matrices = [(kind, shape, q) for (kind, _, shape), q in tensors if len(shape) > 1 and q != _Q.I32]
    pool = _Pool(seed, min(POOL_SIZE, sum(prod(s) for _, s, _ in matrices)))
    scratch = np.empty(_largest_built(tensors), dtype=np.float16)
    with ThreadPoolExecutor(1) as hasher:
        out = _HashedOut(fout, hasher, tmp.read_bytes())
        for t, qtype in tensors:
            out.pad(alignment)
            _write_tensor(out, t, qtype, pool, scratch, n_expert)
        out.pad(alignment)
        return out.hexdigest()


def check_size(target: Path, tensors: list[tuple[TensorSpec, gguf.GGMLQuantizationType]]) -> None:
    """ModelError, before a byte is written, when the file would exceed MAX_SYNTHETIC_BYTES or the
    free space where `target` goes, or the largest tensor built in memory the available memory."""
    n_bytes = sum(_nbytes(shape, q) for (_, _, shape), q in tensors)
    n_params = sum(prod(shape) for (_, _, shape), _ in tensors)
    what = f"synthetic model of {n_params:,} parameters would be {_gib(n_bytes)}"
    if n_bytes > MAX_SYNTHETIC_BYTES:
        raise ModelError(f"{what}, over the cap of {_gib(MAX_SYNTHETIC_BYTES)} on a synthetic model")
    try:
        free_bytes = shutil.disk_usage(target.parent).free
    except OSError:
        free_bytes = None  # the write itself names the directory's problem
    if free_bytes is not None and n_bytes > free_bytes:
        raise ModelError(f"{what}; {target.parent} has {_gib(free_bytes)} free")
    built = _largest_built(tensors)
    need_bytes, available_bytes = built * _BUILD_BYTES_PER_VALUE, psutil.virtual_memory().available
    if need_bytes > available_bytes:
        raise ModelError(f"{what}; building its largest tensor ({built:,} values) needs "
                         f"{_gib(need_bytes)} of memory and {_gib(available_bytes)} is available")


def _gib(n_bytes: int) -> str:
    return f"{n_bytes / 2**30:,.1f} GiB"


def _largest_built(tensors: list[tuple[TensorSpec, gguf.GGMLQuantizationType]]) -> int:
    """Values of the largest matrix assembled in the scratch buffer (edited, or not written as F16)."""
    return max((prod(s) for (k, _, s), q in tensors
                if len(s) > 1 and q != _Q.I32 and (k in _EDITED or q != _Q.F16)), default=0)


def file_tensors(spec: ArchSpec, d: Dims) -> list[tuple[TensorSpec, gguf.GGMLQuantizationType]]:
    """Every tensor in file order with the type it is written as."""
    return [(t, _file_type(t[0], t[2], d)) for t in tensor_list(spec, d)]


def _write_gguf(tmp: Path, spec: ArchSpec, size: str, d: Dims, seed: int) -> tuple[int, str]:
    """Write the whole model to ``tmp``; return its parameter count and sha256."""
    writer = gguf.GGUFWriter(tmp, spec.name)
    writer.add_name(model_name(spec.name, size, spec.sizes[size], d))
    writer.add_description("random weights, for benchmarking only; output is meaningless")
    writer.add_bool(SYNTHETIC_KEY, True)
    writer.add_uint32(SEED_KEY, seed)
    changed = dims_changed(spec.sizes[size], d)
    if changed:  # before SIZE_KEY: read_synthetic_metadata stops reading at the last of _METADATA_KEYS
        writer.add_string(DIMS_KEY, changed)
    writer.add_string(SIZE_KEY, size)
    ftype = gguf.LlamaFileType.MOSTLY_Q8_0 if d.quantized else gguf.LlamaFileType.MOSTLY_F16
    writer.add_file_type(int(ftype))
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    spec.add_hparams(writer, d)
    add_tokenizer(writer, d.n_vocab)
    tensors = file_tensors(spec, d)
    for (kind, bid, shape), qtype in tensors:
        writer.add_tensor_info(tensor_name(kind, bid), shape, np.dtype(np.float32),
                               _nbytes(shape, qtype), raw_dtype=qtype)
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        assert writer.fout is not None
        sha256 = _write_data(writer.fout[0], tmp, tensors, seed, writer.data_alignment, d.n_expert)
    finally:
        writer.close()
    return sum(prod(shape) for (_, _, shape), _ in tensors), sha256


def write_synthetic_gguf(
    path: str | os.PathLike[str], arch: str = "llama", size: str = "tiny", seed: int = 0,
    n_vocab: int | None = None, overrides: Mapping[str, int | tuple[int, ...]] | None = None,
) -> SyntheticModelInfo:
    """Write a deterministic random-weight GGUF atomically; same arguments give the same bytes.

    ``n_vocab`` replaces the size's vocabulary (:data:`N_VOCAB` for tiny and small, 128,256 for
    llama 1.5b, 102,400 for deepseek2 64e, 129,280 for deepseek4 gpu) and leaves every other
    dimension as it is; ``overrides`` replaces others by field name. A shape the architecture's
    rules refuse (e.g. one llama.cpp kills without a word) raises ModelError before any file exists.
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise ModelError(f"synthetic seed must fit in uint32, got {seed}")
    spec, dims = spec_for(arch, size, n_vocab, overrides)
    target = output_path(path)
    check_size(target, file_tensors(spec, dims))
    remove_stale_partials(target)  # left by a write that was killed outright
    try:
        fd, tmp_name = tempfile.mkstemp(".tmp", f".{target.name}.", target.parent)
    except OSError as e:
        raise ModelError(f"cannot write synthetic model to {target}: {e}") from e
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        n_params, sha256 = _write_gguf(tmp, spec, size, dims, seed)
        tmp.chmod(0o644)  # mkstemp made it 0600
        os.replace(tmp, target)
        remember_sha256(target, sha256)  # hashed while written: resolve and capability need not re-read it
    except OSError as e:
        raise ModelError(f"cannot write synthetic model to {target}: {e}") from e
    finally:
        tmp.unlink(missing_ok=True)
    return SyntheticModelInfo(
        path=target,
        arch=arch,
        size=size,
        seed=seed,
        n_vocab=dims.n_vocab,
        dims=dims_changed(spec.sizes[size], dims),
        n_params=n_params,
        file_bytes=target.stat().st_size,
        sha256=sha256,
    )
