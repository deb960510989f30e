"""Shapes of the synthetic models: one table of hyper-parameters per (architecture, size).

Tensor names come from the ``gguf`` package's own tables where it knows the architecture
(checked against ``gguf.MODEL_TENSORS``), so a new architecture is one ``ARCHS`` entry and one
per-layer tensor-list function; optional metadata groups (experts, latent attention) follow the
``Dims`` fields an architecture sets. DeepSeek V4, which the package does not know, has its own
module (:mod:`satbench.gguf.deepseek4`). Shapes are numpy's, i.e. ggml's ``ne`` reversed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import fields, replace
from math import prod
from typing import Any

import gguf

from satbench.errors import ModelError
from satbench.gguf import deepseek4
from satbench.gguf.layout import CONTEXT_LENGTH, ArchSpec, Dims, TensorKind, TensorSpec
from satbench.gguf.vocab import MAX_VOCAB, MIN_VOCAB

__all__ = [
    "ARCHS",
    "CONTEXT_LENGTH",
    "ArchSpec",
    "Dims",
    "TensorSpec",
    "parameter_count",
    "parse_overrides",
    "spec_for",
    "tensor_list",
    "tensor_name",
]

_T = gguf.MODEL_TENSOR


def _attn_tensors(d: Dims, bid: int, qk_norm: bool = False) -> list[TensorSpec]:
    """Grouped-query attention block."""
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


def add_hparams(w: gguf.GGUFWriter, d: Dims) -> None:
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
    w.add_vocab_size(d.n_vocab)
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
# Llama-3.2-1B's shape with untied output: 1,498,482,688 parameters, about 3.0 GB in F16
_LLAMA_1_5B = Dims(
    n_layer=16, n_embd=2048, n_head=32, n_head_kv=8, head_dim=64, n_ff=8192, quantized=False,
    n_vocab=128_256,
)
_QWEN3MOE_TINY = replace(_LLAMA_TINY, n_expert=8, n_expert_used=2, n_ff_exp=128)
_QWEN3MOE_SMALL = replace(_LLAMA_SMALL, n_expert=16, n_expert_used=2, n_ff_exp=128)


def _mla(moe: Dims, q_lora: int, kv_lora: int) -> Dims:
    """`moe` with DeepSeek's multi-head latent attention of LoRA ranks `q_lora` and `kv_lora`."""
    return replace(moe, q_lora=q_lora, kv_lora=kv_lora, n_head_kv=1, head_dim=0, n_expert_shared=1,
                   n_dense_lead=1, rope_dim=32, nope_dim=64, v_head=64)


# DeepSeek-V2-Lite's layer (64 routed experts top-6, 2 shared, MLA) with a V2 q-LoRA and 12
# layers instead of 27: 6,952,659,648 parameters, about 13.9 GB in F16. Not 26 or 27 layers:
# llama.cpp takes those for V2-Lite and then expects no q-LoRA.
_DEEPSEEK2_64E = Dims(
    n_layer=12, n_embd=2048, n_head=16, n_head_kv=1, head_dim=0, n_ff=10944, quantized=False,
    n_vocab=102_400, n_expert=64, n_expert_used=6, n_ff_exp=1408, n_expert_shared=2,
    n_dense_lead=1, q_lora=1536, kv_lora=512, rope_dim=64, nope_dim=128, v_head=128,
)

def _refuse(arch: str, rules: list[tuple[bool, str]]) -> None:
    """ModelError naming the first rule that does not hold."""
    broken = next((why for ok, why in rules if not ok), None)
    if broken is not None:
        raise ModelError(f"{arch} shape refused: {broken}")


def _moe_rules(d: Dims) -> list[tuple[bool, str]]:
    return [(d.n_expert == 0 or 0 < d.n_expert_used <= d.n_expert,
             f"n_expert_used ({d.n_expert_used}) must be 1 to n_expert ({d.n_expert})"),
            (d.n_expert == 0 or d.n_ff_exp >= 1, "n_ff_exp must be at least 1")]


def _gqa_rules(arch: str) -> Callable[[Dims], None]:
    """Grouped-query attention: whole KV groups (llama.cpp divides by n_head_kv), non-empty heads."""
    def check(d: Dims) -> None:
        _refuse(arch, [(d.head_dim >= 1 and d.n_head_kv >= 1, "head_dim and n_head_kv must be at least 1"),
                       (d.n_head_kv < 1 or d.n_head % d.n_head_kv == 0,
                        f"n_head_kv ({d.n_head_kv}) must divide n_head ({d.n_head})"),
                       (d.n_ff >= 1, "n_ff must be at least 1")] + _moe_rules(d))
    return check


def _mla_rules(d: Dims) -> None:
    """DeepSeek V2/V3's latent attention and routing."""
    _refuse("deepseek2", [(min(d.q_lora, d.kv_lora, d.nope_dim, d.v_head) >= 1,
                           "q_lora, kv_lora, nope_dim and v_head must be at least 1"),
                          (d.rope_dim >= 2 and d.rope_dim % 2 == 0, f"rope_dim ({d.rope_dim}) must be even"),
                          (d.n_expert_shared >= 1, "n_expert_shared must be at least 1"),
                          (d.n_dense_lead < d.n_layer,
                           f"n_dense_lead ({d.n_dense_lead}) must leave a MoE layer"),
                          (d.n_ff >= 1, "n_ff must be at least 1")] + _moe_rules(d))


_GQA = frozenset({"n_layer", "n_embd", "n_head", "n_head_kv", "head_dim", "n_ff", "n_vocab"})
_MOE = frozenset({"n_expert", "n_expert_used", "n_ff_exp"})
_MLA_DIMS = frozenset({"n_layer", "n_embd", "n_head", "n_ff", "n_vocab", "n_expert_shared", "n_dense_lead",
                       "q_lora", "kv_lora", "rope_dim", "nope_dim", "v_head"}) | _MOE

#: architecture name (``general.architecture``) -> its table entry
ARCHS: dict[str, ArchSpec] = {
    "llama": ArchSpec(
        "llama", gguf.MODEL_ARCH.LLAMA,
        {"tiny": _LLAMA_TINY, "small": _LLAMA_SMALL, "1.5b": _LLAMA_1_5B},
        lambda d, bid: _attn_tensors(d, bid) + _dense_ffn(d, bid), add_hparams, check=_gqa_rules("llama"),
        dims=_GQA,
    ),
    "qwen3moe": ArchSpec(
        "qwen3moe", gguf.MODEL_ARCH.QWEN3MOE,
        {"tiny": _QWEN3MOE_TINY, "small": _QWEN3MOE_SMALL},
        lambda d, bid: _attn_tensors(d, bid, qk_norm=True) + _moe_ffn(d, bid), add_hparams,
        check=_gqa_rules("qwen3moe"), dims=_GQA | _MOE,
    ),
    "deepseek2": ArchSpec(
        "deepseek2", gguf.MODEL_ARCH.DEEPSEEK2,
        {
            "tiny": _mla(_QWEN3MOE_TINY, q_lora=128, kv_lora=128),
            "small": _mla(_QWEN3MOE_SMALL, q_lora=384, kv_lora=256),
            "64e": _DEEPSEEK2_64E,
        },
        _deepseek2_layer, add_hparams, check=_mla_rules, dims=_MLA_DIMS,
    ),
    deepseek4.ARCH: deepseek4.SPEC,
}


def spec_for(arch: str, size: str, n_vocab: int | None = None,
             overrides: Mapping[str, int | tuple[int, ...]] | None = None) -> tuple[ArchSpec, Dims]:
    """The table entry and dimensions of (arch, size), with the vocabulary size and any other
    dimension (`overrides`, by :class:`Dims` field name) replaced, checked against the
    architecture's shape rules: ModelError naming the first one broken."""
    spec = ARCHS.get(arch)
    if spec is None:
        raise ModelError(f"unknown synthetic architecture {arch!r}; known: {', '.join(ARCHS)}")
    dims = spec.sizes.get(size)
    if dims is None:
        raise ModelError(f"unknown synthetic size {size!r} for {arch}; known: {', '.join(spec.sizes)}")
    merged = {**(overrides or {}), **({} if n_vocab is None else {"n_vocab": n_vocab})}
    if merged:
        dims = _overridden(arch, dims, merged)
    spec.check(dims)
    return spec, dims


def _overridden(arch: str, dims: Dims, overrides: Mapping[str, int | tuple[int, ...]]) -> Dims:
    """`dims` with fields replaced; ModelError for an unknown field or a value of the wrong kind."""
    vocab = overrides.get("n_vocab")
    if vocab is not None and (isinstance(vocab, bool) or not isinstance(vocab, int)
                              or not MIN_VOCAB <= vocab <= MAX_VOCAB):
        raise ModelError(f"synthetic vocabulary must be {MIN_VOCAB:,} to {MAX_VOCAB:,} tokens, got {vocab}")
    kinds = {f.name: f.type for f in fields(dims) if f.name in ARCHS[arch].dims}
    typed: dict[str, Any] = {}  # each value checked against its field's kind below
    for name, value in overrides.items():
        if name not in kinds:
            raise ModelError(f"{arch} has no dimension {name!r}; known: {', '.join(sorted(kinds))}")
        many = "tuple" in str(kinds[name])
        items = value if isinstance(value, tuple) else (value,)
        if (isinstance(value, tuple) and not many) or any(isinstance(v, bool) or not isinstance(v, int)
                                                          or not 0 <= v <= _MAX_DIM for v in items):
            want = ("a comma-separated list of integers" if many else "an integer") + f" 0 to {_MAX_DIM:,}"
            raise ModelError(f"dimension {name} must be {want}, got {value!r}")
        typed[name] = items if many else value
    changed = replace(dims, **typed)
    for name in _POSITIVE:
        if getattr(changed, name) < 1:
            raise ModelError(f"{arch} shape refused: {name} must be at least 1")
    if changed.n_layer > MAX_LAYERS:
        raise ModelError(f"{arch} shape refused: n_layer must be at most {MAX_LAYERS} (llama.cpp's limit), "
                         f"got {changed.n_layer:,}")
    return changed


_POSITIVE = ("n_layer", "n_embd", "n_head")
_MAX_DIM = 2**31 - 1  # GGUF keeps the dimensions as 32-bit integers
MAX_LAYERS = 512  # llama.cpp's LLAMA_MAX_LAYERS; also bounds the tensor list built before any size check


def parse_overrides(pairs: list[str]) -> dict[str, int | tuple[int, ...]]:
    """`["head_dim=64", "compress_ratios=0,4,0"]` → {"head_dim": 64, "compress_ratios": (0, 4, 0)};
    ModelError for a pair that is not NAME=INTEGER[,INTEGER…]."""
    out: dict[str, int | tuple[int, ...]] = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        try:
            values = tuple(int(v) for v in text.split(","))
        except ValueError:
            values = ()
        if not sep or not name.strip() or not values:
            raise ModelError(f"--dim {pair!r}: expected NAME=INTEGER or NAME=INTEGER,INTEGER,...")
        out[name.strip()] = values if "," in text else values[0]
    return out


def tensor_list(spec: ArchSpec, d: Dims) -> list[TensorSpec]:
    """Every tensor of the model in file order, checked against gguf's table where gguf knows the arch."""
    tensors: list[TensorSpec] = [(_T.TOKEN_EMBD, None, (d.n_vocab, d.n_embd))]
    for bid in range(d.n_layer):
        tensors += spec.layer_tensors(d, bid)
    tensors += [(_T.OUTPUT_NORM, None, (d.n_embd,)), (_T.OUTPUT, None, (d.n_vocab, d.n_embd))]
    tensors += spec.extra_tensors(d)
    if spec.gguf_arch is not None:
        allowed = set(gguf.MODEL_TENSORS[spec.gguf_arch])
        unknown = [tensor_name(t, None) for t, _, _ in tensors if t not in allowed]
        if unknown:
            raise ModelError(f"gguf has no tensor {unknown[0]} for {spec.name}")
    return tensors


def tensor_name(kind: TensorKind, bid: int | None) -> str:
    """The GGUF name, e.g. ``blk.3.ffn_down_exps.weight``; a name template is formatted as it is."""
    suffix = "bias" if kind == _T.FFN_EXP_PROBS_B else "weight"
    base = kind if isinstance(kind, str) else gguf.TENSOR_NAMES[kind]
    return f"{base.format(bid=bid) if bid is not None else base}.{suffix}"


def parameter_count(arch: str, size: str, n_vocab: int | None = None,
                    overrides: Mapping[str, int | tuple[int, ...]] | None = None) -> int:
    """Parameters of (arch, size), from the tensor list alone; writes nothing."""
    spec, d = spec_for(arch, size, n_vocab, overrides)
    return sum(prod(shape) for _, _, shape in tensor_list(spec, d))
