"""Random-weight GGUF models that real llama.cpp loads and generates from.

A synthetic model costs no download and no licence, yet makes the server do real work: the
hyper-parameters of each (architecture, size) pair live in one table, and the tensor names come
from the ``gguf`` package's own tables (checked against ``gguf.MODEL_TENSORS``), so a new
architecture is one ``ARCHS`` entry and one per-layer tensor-list function; optional metadata
groups (experts, latent attention) follow the ``Dims`` fields an architecture sets.

Random output must stay valid UTF-8, or the server holds bytes back and merges stream chunks.
Every non-byte piece is ASCII, and the weights keep a "bias channel": residual dimension 0 holds
a constant that no layer writes to, so the output row of every token that must never be
generated (``<unk>``, ``<s>``, non-printable or non-ASCII byte tokens) scores far below the rest.
The byte tokens still exist, so any prompt text tokenizes through byte fallback.
"""

from __future__ import annotations

import hashlib
import os
import struct
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from pydantic import BaseModel, ConfigDict

from satbench.errors import ModelError

_T = gguf.MODEL_TENSOR
SYNTHETIC_KEY = "satbench.synthetic"
SEED_KEY = "satbench.seed"
SIZE_KEY = "satbench.size"
N_VOCAB = 1024
UNK_ID, BOS_ID, EOS_ID = 0, 1, 2
BYTE_BASE = 3  # token id of <0x00>
CONTEXT_LENGTH = 4096
_WEIGHT_STD = 0.02
_OUTPUT_STD = 0.05
_SUPPRESS = 2.0  # minus the bias-channel weight of a token that must not be generated
_RESIDUAL_WRITERS = frozenset({_T.ATTN_OUT, _T.FFN_DOWN, _T.FFN_DOWN_EXP, _T.FFN_DOWN_SHEXP})
_KEEP_F32 = frozenset({_T.FFN_GATE_INP, _T.FFN_EXP_PROBS_B})
_WORDS = (
    "the of and to in is it that for on with as was he be at by this had not are but from or"
    " have an they which one you were her all she there would their we him been has when who"
    " will more"
    " no if out so said what up its about into than them can only other new some could"
    " time these two may then do first any my now such like our over even most made after"
).split()

TensorSpec = tuple[gguf.MODEL_TENSOR, int | None, tuple[int, ...]]


class SyntheticModelInfo(BaseModel):
    """What :func:`write_synthetic_gguf` wrote."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: Path
    arch: str
    size: str
    seed: int
    n_params: int
    file_bytes: int
    sha256: str


@dataclass(frozen=True)
class Dims:
    """Hyper-parameters of one (architecture, size); unused fields stay 0.

    ``n_expert*``/``n_ff_exp`` describe a mixture of experts; ``q_lora``, ``kv_lora``,
    ``rope_dim``, ``nope_dim`` and ``v_head`` describe DeepSeek's multi-head latent attention.
    """

    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    quantized: bool  # Q8_0 matrices when true, F16 otherwise
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_exp: int = 0
    n_expert_shared: int = 0
    n_dense_lead: int = 0
    q_lora: int = 0
    kv_lora: int = 0
    rope_dim: int = 0
    nope_dim: int = 0
    v_head: int = 0


@dataclass(frozen=True)
class ArchSpec:
    """One architecture: its gguf enum, hyper-parameters per size, and per-layer tensors."""

    arch: gguf.MODEL_ARCH
    sizes: Mapping[str, Dims]
    layer_tensors: Callable[[Dims, int], list[TensorSpec]]


def _attn_tensors(d: Dims, bid: int, qk_norm: bool = False) -> list[TensorSpec]:
    """Grouped-query attention block; numpy shapes are ggml's ``ne`` reversed."""
    q, kv = d.n_head * d.head_dim, d.n_head_kv * d.head_dim
    out: list[TensorSpec] = [
        (_T.ATTN_NORM, bid, (d.n_embd,)),
        (_T.ATTN_Q, bid, (q, d.n_embd)),
        (_T.ATTN_K, bid, (kv, d.n_embd)),
        (_T.ATTN_V, bid, (kv, d.n_embd)),
        (_T.ATTN_OUT, bid, (d.n_embd, q)),
    ]
    if qk_norm:
        out += [(_T.ATTN_Q_NORM, bid, (d.head_dim,)), (_T.ATTN_K_NORM, bid, (d.head_dim,))]
    return out


def _dense_ffn(d: Dims, bid: int) -> list[TensorSpec]:
    """SwiGLU feed-forward block with its norm."""
    return [
        (_T.FFN_NORM, bid, (d.n_embd,)),
        (_T.FFN_GATE, bid, (d.n_ff, d.n_embd)),
        (_T.FFN_UP, bid, (d.n_ff, d.n_embd)),
        (_T.FFN_DOWN, bid, (d.n_embd, d.n_ff)),
    ]


def _moe_ffn(d: Dims, bid: int) -> list[TensorSpec]:
    """Router plus 3-D expert tensors with their norm."""
    e, f, n = d.n_expert, d.n_ff_exp, d.n_embd
    return [
        (_T.FFN_NORM, bid, (n,)),
        (_T.FFN_GATE_INP, bid, (e, n)),
        (_T.FFN_GATE_EXP, bid, (e, f, n)),
        (_T.FFN_UP_EXP, bid, (e, f, n)),
        (_T.FFN_DOWN_EXP, bid, (e, n, f)),
    ]


def _deepseek2_layer(d: Dims, bid: int) -> list[TensorSpec]:
    """Multi-head latent attention (split k_b/v_b form), then dense or MoE + shared expert."""
    k_mla = d.nope_dim + d.rope_dim
    out: list[TensorSpec] = [
        (_T.ATTN_NORM, bid, (d.n_embd,)),
        (_T.ATTN_Q_A, bid, (d.q_lora, d.n_embd)),
        (_T.ATTN_Q_A_NORM, bid, (d.q_lora,)),
        (_T.ATTN_Q_B, bid, (d.n_head * k_mla, d.q_lora)),
        (_T.ATTN_KV_A_MQA, bid, (d.kv_lora + d.rope_dim, d.n_embd)),
        (_T.ATTN_KV_A_NORM, bid, (d.kv_lora,)),
        (_T.ATTN_K_B, bid, (d.n_head, d.kv_lora, d.nope_dim)),
        (_T.ATTN_V_B, bid, (d.n_head, d.v_head, d.kv_lora)),
        (_T.ATTN_OUT, bid, (d.n_embd, d.n_head * d.v_head)),
    ]
    if bid < d.n_dense_lead:
        return out + _dense_ffn(d, bid)
    shared = d.n_ff_exp * d.n_expert_shared
    return out + _moe_ffn(d, bid) + [
        (_T.FFN_EXP_PROBS_B, bid, (d.n_expert,)),
        (_T.FFN_GATE_SHEXP, bid, (shared, d.n_embd)),
        (_T.FFN_UP_SHEXP, bid, (shared, d.n_embd)),
        (_T.FFN_DOWN_SHEXP, bid, (d.n_embd, shared)),
    ]


def _add_hparams(w: gguf.GGUFWriter, d: Dims) -> None:
    """Hyper-parameter keys; the optional groups follow the fields the architecture sets."""
    w.add_context_length(CONTEXT_LENGTH)
    w.add_embedding_length(d.n_embd)
    w.add_block_count(d.n_layer)
    w.add_feed_forward_length(d.n_ff)
    w.add_head_count(d.n_head)
    w.add_head_count_kv(d.n_head_kv)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0)
    w.add_rope_dimension_count(d.rope_dim or d.head_dim)  # llama: must equal head_dim
    w.add_vocab_size(N_VOCAB)
    if d.head_dim:
        w.add_key_length(d.head_dim)
        w.add_value_length(d.head_dim)
    if d.n_expert:
        w.add_expert_count(d.n_expert)
        w.add_expert_used_count(d.n_expert_used)  # without it an MoE load asserts and aborts
        w.add_expert_feed_forward_length(d.n_ff_exp)
    if d.kv_lora:  # multi-head latent attention: the cache holds the latent + rope part
        w.add_leading_dense_block_count(d.n_dense_lead)
        w.add_q_lora_rank(d.q_lora)
        w.add_kv_lora_rank(d.kv_lora)
        w.add_key_length(d.kv_lora + d.rope_dim)
        w.add_value_length(d.kv_lora)
        w.add_key_length_mla(d.nope_dim + d.rope_dim)
        w.add_value_length_mla(d.v_head)
        w.add_expert_shared_count(d.n_expert_shared)
        w.add_expert_weights_norm(True)
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)


_LLAMA_TINY = Dims(
    n_layer=4, n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=512, quantized=False
)
_LLAMA_SMALL = Dims(
    n_layer=12, n_embd=768, n_head=12, n_head_kv=4, head_dim=64, n_ff=2048, quantized=True
)
_QWEN3MOE_TINY = replace(_LLAMA_TINY, n_expert=8, n_expert_used=2, n_ff_exp=128)
_QWEN3MOE_SMALL = replace(_LLAMA_SMALL, n_expert=16, n_expert_used=2, n_ff_exp=128)
_MLA = dict(
    n_head_kv=1, head_dim=0, n_expert_shared=1, n_dense_lead=1, rope_dim=32, nope_dim=64, v_head=64
)

#: architecture name (``general.architecture``) -> its table entry
ARCHS: dict[str, ArchSpec] = {
    "llama": ArchSpec(
        gguf.MODEL_ARCH.LLAMA,
        {"tiny": _LLAMA_TINY, "small": _LLAMA_SMALL},
        lambda d, bid: _attn_tensors(d, bid) + _dense_ffn(d, bid),
    ),
    "qwen3moe": ArchSpec(
        gguf.MODEL_ARCH.QWEN3MOE,
        {"tiny": _QWEN3MOE_TINY, "small": _QWEN3MOE_SMALL},
        lambda d, bid: _attn_tensors(d, bid, qk_norm=True) + _moe_ffn(d, bid),
    ),
    "deepseek2": ArchSpec(
        gguf.MODEL_ARCH.DEEPSEEK2,
        {
            "tiny": replace(_QWEN3MOE_TINY, q_lora=128, kv_lora=128, **_MLA),
            "small": replace(_QWEN3MOE_SMALL, q_lora=384, kv_lora=256, **_MLA),
        },
        _deepseek2_layer,
    ),
}


def _word_pieces() -> list[str]:
    """The 765 ASCII pieces after the specials and bytes, most useful first."""
    pieces: dict[str, None] = {"\u2581": None}
    for word in _WORDS:
        for end in range(1, len(word) + 1):  # prefixes keep whole words reachable by merges
            pieces["\u2581" + word[:end]] = None
    alnum = [chr(c) for c in range(0x61, 0x7B)] + [chr(c) for c in range(0x30, 0x3A)]
    pieces.update(dict.fromkeys("\u2581" + c for c in alnum))
    pieces.update(dict.fromkeys(chr(c) for c in range(0x21, 0x7F)))
    pieces.update(dict.fromkeys(a + b for a in alnum[:26] for b in alnum[:26]))
    return list(pieces)[: N_VOCAB - BYTE_BASE - 256]


def build_vocab() -> tuple[list[str], list[float], list[int]]:
    """Tokens, scores and token types of the SentencePiece vocabulary."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.BYTE] * 256
    words = _word_pieces()
    scores = [0.0] * len(tokens) + [-float(i) for i in range(len(words))]
    tokens += words
    types += [gguf.TokenType.NORMAL] * len(words)
    if len(tokens) != N_VOCAB:
        raise ModelError(f"synthetic vocabulary has {len(tokens)} pieces, expected {N_VOCAB}")
    return tokens, scores, [int(t) for t in types]


def suppressed_token_ids() -> list[int]:
    """Tokens random output must never produce: unk, bos, and bytes that are not printable ASCII."""
    printable = set(range(0x20, 0x7F)) | {0x09, 0x0A}
    return [UNK_ID, BOS_ID] + [BYTE_BASE + b for b in range(256) if b not in printable]


def _add_tokenizer(w: gguf.GGUFWriter) -> None:
    tokens, scores, types = build_vocab()
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(UNK_ID)
    w.add_bos_token_id(BOS_ID)
    w.add_eos_token_id(EOS_ID)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)


def _tensor_list(spec: ArchSpec, d: Dims) -> list[TensorSpec]:
    """Every tensor of the model, checked against gguf's table for the architecture."""
    tensors: list[TensorSpec] = [(_T.TOKEN_EMBD, None, (N_VOCAB, d.n_embd))]
    for bid in range(d.n_layer):
        tensors += spec.layer_tensors(d, bid)
    tensors += [(_T.OUTPUT_NORM, None, (d.n_embd,)), (_T.OUTPUT, None, (N_VOCAB, d.n_embd))]
    allowed = set(gguf.MODEL_TENSORS[spec.arch])
    unknown = [gguf.TENSOR_NAMES[t] for t, _, _ in tensors if t not in allowed]
    if unknown:
        raise ModelError(f"gguf has no tensor {unknown[0]} for {spec.arch.name}")
    return tensors


def _tensor_name(kind: gguf.MODEL_TENSOR, bid: int | None) -> str:
    suffix = "bias" if kind == _T.FFN_EXP_PROBS_B else "weight"
    base = gguf.TENSOR_NAMES[kind]
    return f"{base.format(bid=bid) if bid is not None else base}.{suffix}"


def _init_values(
    kind: gguf.MODEL_TENSOR, shape: tuple[int, ...], rng: np.random.Generator
) -> np.ndarray:
    """Random float32 values; norms are ones, and residual dimension 0 is the bias channel."""
    if kind == _T.FFN_EXP_PROBS_B:
        return np.zeros(shape, dtype=np.float32)
    if len(shape) == 1:
        return np.ones(shape, dtype=np.float32)
    values = rng.standard_normal(shape, dtype=np.float32)
    if kind == _T.TOKEN_EMBD:
        values[:, 0] = np.float32(np.sqrt(shape[1]))  # constant: half the squared norm
        return values
    values *= np.float32(_OUTPUT_STD if kind == _T.OUTPUT else _WEIGHT_STD)
    if kind == _T.OUTPUT:
        values[:, 0] = 0.0
        bad = suppressed_token_ids()
        values[bad, :] = 0.0
        values[bad, 0] = -_SUPPRESS
    elif kind in _RESIDUAL_WRITERS:
        values[..., 0, :] = 0.0  # no layer writes to the bias channel
    return values


def _encode(
    kind: gguf.MODEL_TENSOR, values: np.ndarray, d: Dims
) -> tuple[np.ndarray, gguf.GGMLQuantizationType | None]:
    """Cast to the file's type: F32 for vectors and routers, Q8_0 or F16 for matrices."""
    if values.ndim == 1 or kind in _KEEP_F32:
        return values, None
    if d.quantized and values.shape[-1] % 32 == 0:
        qtype = gguf.GGMLQuantizationType.Q8_0
        return gguf.quants.quantize(values, qtype), qtype
    return values.astype(np.float16), None


def _spec_for(arch: str, size: str) -> tuple[ArchSpec, Dims]:
    spec = ARCHS.get(arch)
    if spec is None:
        raise ModelError(f"unknown synthetic architecture {arch!r}; known: {', '.join(ARCHS)}")
    dims = spec.sizes.get(size)
    if dims is None:
        raise ModelError(f"unknown synthetic size {size!r}; known: {', '.join(spec.sizes)}")
    return spec, dims


def _write_gguf(tmp: Path, arch: str, size: str, seed: int) -> int:
    """Write the whole model to ``tmp``; return its parameter count."""
    spec, d = _spec_for(arch, size)
    writer = gguf.GGUFWriter(tmp, gguf.MODEL_ARCH_NAMES[spec.arch])
    writer.add_name(f"satbench-synthetic-{arch}-{size}")
    writer.add_description("random weights, for benchmarking only; output is meaningless")
    writer.add_bool(SYNTHETIC_KEY, True)
    writer.add_uint32(SEED_KEY, seed)
    writer.add_string(SIZE_KEY, size)
    ftype = gguf.LlamaFileType.MOSTLY_Q8_0 if d.quantized else gguf.LlamaFileType.MOSTLY_F16
    writer.add_file_type(int(ftype))
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    _add_hparams(writer, d)
    _add_tokenizer(writer)
    rng = np.random.default_rng(seed)
    n_params = 0
    for kind, bid, shape in _tensor_list(spec, d):
        data, raw_dtype = _encode(kind, _init_values(kind, shape, rng), d)
        writer.add_tensor(_tensor_name(kind, bid), data, raw_dtype=raw_dtype)
        n_params += int(np.prod(shape))
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()
    return n_params


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def write_synthetic_gguf(
    path: str | os.PathLike[str], arch: str = "llama", size: str = "tiny", seed: int = 0
) -> SyntheticModelInfo:
    """Write a deterministic random-weight GGUF atomically; same arguments give the same bytes."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise ModelError(f"synthetic seed must fit in uint32, got {seed}")
    _spec_for(arch, size)
    target = Path(path)
    try:
        fd, tmp_name = tempfile.mkstemp(".tmp", f".{target.name}.", target.parent)
    except OSError as e:
        raise ModelError(f"cannot write synthetic model to {target}: {e}") from e
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        n_params = _write_gguf(tmp, arch, size, seed)
        tmp.chmod(0o644)  # mkstemp made it 0600
        os.replace(tmp, target)
    except OSError as e:
        raise ModelError(f"cannot write synthetic model to {target}: {e}") from e
    finally:
        tmp.unlink(missing_ok=True)
    return SyntheticModelInfo(
        path=target,
        arch=arch,
        size=size,
        seed=seed,
        n_params=n_params,
        file_bytes=target.stat().st_size,
        sha256=_sha256(target),
    )


def read_synthetic_metadata(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The ``satbench.*`` keys of a GGUF file, or None if it is not synthetic."""
    try:
        reader = gguf.GGUFReader(path)
    except (OSError, ValueError, LookupError, struct.error) as e:
        raise ModelError(f"cannot read GGUF {path}: {e}") from e
    field = reader.get_field(SYNTHETIC_KEY)
    if field is None or not field.contents():
        return None
    keys = (SYNTHETIC_KEY, SEED_KEY, SIZE_KEY, "general.architecture", "general.name")
    return {k: f.contents() for k in keys if (f := reader.get_field(k)) is not None}


def is_synthetic_gguf(path: str | os.PathLike[str]) -> bool:
    """True when the GGUF at ``path`` was written by :func:`write_synthetic_gguf`."""
    return read_synthetic_metadata(path) is not None
