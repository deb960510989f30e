"""DeepSeek V4 (``deepseek4``): the synthetic table entry, its GGUF keys and its shape rules.

The layout is llama.cpp's own (``src/models/deepseek4.cpp``, ``load_arch_hparams`` and
``load_arch_tensors``): one shared-KV attention head group of ``head_dim`` with a q-LoRA, grouped
low-rank output, attention sinks, a sliding window, per-layer KV compression (ratio 0: the raw
window only; 4: CSA, with a lightning indexer; 128: HCA), hyper-connections (4 residual copies
mixed by Sinkhorn-normalised matrices), and routed experts with one shared expert, where the
first ``n_hash_layer`` layers route by token id (``ffn_gate_tid2eid``, I32) instead of by score.
The ``gguf`` package has no tables for it, so keys are written by name and tensors by name template.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import gguf

from satbench.errors import ModelError
from satbench.gguf.layout import ArchSpec, Dims, TensorSpec

_T = gguf.MODEL_TENSOR
ARCH = "deepseek4"
HC_COUNT = 4  # llama.cpp's kernels take exactly four residual copies
GATING_SQRT_SOFTPLUS = 4  # LLAMA_EXPERT_GATING_FUNC_TYPE_SQRT_SOFTPLUS: the only scoring V4 loads
RATIOS = (0, 4, 128)

# tensors gguf's tables lack, by GGUF name template
ATTN_KV = "blk.{bid}.attn_kv"
ATTN_KV_NORM = "blk.{bid}.attn_kv_a_norm"
ATTN_OUT_A = "blk.{bid}.attn_output_a"
ATTN_OUT_B = "blk.{bid}.attn_output_b"  # writes the residual stream
HC_FN = ("blk.{bid}.hc_attn_fn", "blk.{bid}.hc_ffn_fn")
HC_BASE = ("blk.{bid}.hc_attn_base", "blk.{bid}.hc_ffn_base")
HC_SCALE = ("blk.{bid}.hc_attn_scale", "blk.{bid}.hc_ffn_scale")
COMP = "blk.{bid}.attn_compressor_"
INDEXER_COMP = "blk.{bid}.indexer_compressor_"
TID2EID = "blk.{bid}.ffn_gate_tid2eid"  # token id -> expert ids, I32
OUTPUT_HC = ("output_hc_fn", "output_hc_base", "output_hc_scale")
#: small matrices kept in F32: hyper-connection mixers and the compressors' position embeddings
F32_MATRICES = frozenset({*HC_FN, OUTPUT_HC[0], COMP + "ape", INDEXER_COMP + "ape"})


@dataclass(frozen=True)
class V4Dims(Dims):
    """V4's dimensions beyond :class:`Dims` (whose ``head_dim`` is the one shared K/V head,
    ``rope_dim`` its rotary part, ``q_lora`` the query LoRA rank)."""

    n_swa: int = 0
    n_indexer_head: int = 0
    indexer_key_len: int = 0
    indexer_top_k: int = 0
    n_out_group: int = 0
    out_lora: int = 0
    compress_ratios: tuple[int, ...] = ()
    n_hash_layer: int = 0
    hc_count: int = HC_COUNT
    hc_sinkhorn_iters: int = 20
    n_ctx_train: int = 1_048_576  # V4-Flash's: the server does not cap a slot's context below it


def add_hparams(w: gguf.GGUFWriter, d: Dims) -> None:
    """Every key ``load_arch_hparams`` reads, with the types it checks (u32, f32, bool, arrays)."""
    assert isinstance(d, V4Dims)
    p = f"{ARCH}."
    u32 = {
        "context_length": d.n_ctx_train, "embedding_length": d.n_embd, "block_count": d.n_layer,
        "feed_forward_length": d.n_ff_exp, "vocab_size": d.n_vocab,
        "attention.head_count": d.n_head, "attention.head_count_kv": 1,
        "attention.key_length": d.head_dim, "attention.value_length": d.head_dim,
        "rope.dimension_count": d.rope_dim, "attention.q_lora_rank": d.q_lora,
        "attention.sliding_window": d.n_swa, "attention.indexer.head_count": d.n_indexer_head,
        "attention.indexer.key_length": d.indexer_key_len, "attention.indexer.top_k": d.indexer_top_k,
        "attention.output_group_count": d.n_out_group, "attention.output_lora_rank": d.out_lora,
        "expert_count": d.n_expert, "expert_used_count": d.n_expert_used,
        "expert_feed_forward_length": d.n_ff_exp, "expert_shared_count": d.n_expert_shared,
        "expert_gating_func": GATING_SQRT_SOFTPLUS, "hyper_connection.count": d.hc_count,
        "hyper_connection.sinkhorn_iterations": d.hc_sinkhorn_iters,
        "hash_layer_count": d.n_hash_layer, "nextn_predict_layers": 0,
    }
    for key, value in u32.items():
        w.add_uint32(p + key, value)
    f32 = {"attention.layer_norm_rms_epsilon": 1e-6, "rope.freq_base": 10000.0,
           "attention.compress_rope_freq_base": 160000.0, "expert_weights_scale": 1.5,
           "hyper_connection.epsilon": 1e-6}
    for key, fvalue in f32.items():
        w.add_float32(p + key, fvalue)
    w.add_bool(p + "expert_weights_norm", True)
    w.add_array(p + "attention.compress_ratios", list(d.compress_ratios))
    w.add_array(p + "swiglu_clamp_exp", [10.0] * d.n_layer)


def layer_tensors(d: Dims, bid: int) -> list[TensorSpec]:
    """One layer as ``load_arch_tensors`` creates it (numpy shapes: ggml ``ne`` reversed)."""
    assert isinstance(d, V4Dims)
    e, h, hd, q = d.n_embd, d.n_head, d.head_dim, d.q_lora
    mix = (2 + d.hc_count) * d.hc_count
    out: list[TensorSpec] = [
        (_T.ATTN_NORM, bid, (e,)),
        (_T.ATTN_SINKS, bid, (h,)),
        (_T.ATTN_Q_A, bid, (q, e)),
        (_T.ATTN_Q_A_NORM, bid, (q,)),
        (_T.ATTN_Q_B, bid, (h * hd, q)),
        (ATTN_KV, bid, (hd, e)),
        (ATTN_KV_NORM, bid, (hd,)),
        (ATTN_OUT_A, bid, (d.out_lora * d.n_out_group, h * hd // d.n_out_group)),
        (ATTN_OUT_B, bid, (e, d.n_out_group * d.out_lora)),
    ]
    for fn, base, scale in zip(HC_FN, HC_BASE, HC_SCALE):
        out += [(fn, bid, (mix, d.hc_count * e)), (base, bid, (mix,)), (scale, bid, (3,))]
    ratio = d.compress_ratios[bid]
    if ratio:
        width = (2 if ratio == 4 else 1) * hd
        out += [(COMP + "kv", bid, (width, e)), (COMP + "gate", bid, (width, e)),
                (COMP + "ape", bid, (ratio, width)), (COMP + "norm", bid, (hd,))]
    if ratio == 4:
        k2 = 2 * d.indexer_key_len
        out += [
            (_T.INDEXER_PROJ, bid, (d.n_indexer_head, e)),
            (_T.INDEXER_ATTN_Q_B, bid, (d.n_indexer_head * d.indexer_key_len, q)),
            (INDEXER_COMP + "kv", bid, (k2, e)), (INDEXER_COMP + "gate", bid, (k2, e)),
            (INDEXER_COMP + "ape", bid, (4, k2)), (INDEXER_COMP + "norm", bid, (d.indexer_key_len,)),
        ]
    x, f, shared = d.n_expert, d.n_ff_exp, d.n_ff_exp * d.n_expert_shared
    out.append((_T.FFN_GATE_INP, bid, (x, e)))
    out.append((TID2EID, bid, (d.n_vocab, d.n_expert_used)) if bid < d.n_hash_layer
               else (_T.FFN_EXP_PROBS_B, bid, (x,)))
    return out + [
        (_T.FFN_NORM, bid, (e,)),
        (_T.FFN_GATE_EXP, bid, (x, f, e)),
        (_T.FFN_DOWN_EXP, bid, (x, e, f)),
        (_T.FFN_UP_EXP, bid, (x, f, e)),
        (_T.FFN_GATE_SHEXP, bid, (shared, e)),
        (_T.FFN_DOWN_SHEXP, bid, (e, shared)),
        (_T.FFN_UP_SHEXP, bid, (shared, e)),
    ]


def extra_tensors(d: Dims) -> list[TensorSpec]:
    """The output head's hyper-connection combiner."""
    assert isinstance(d, V4Dims)
    fn, base, scale = OUTPUT_HC
    return [(fn, None, (d.hc_count, d.hc_count * d.n_embd)), (base, None, (d.hc_count,)), (scale, None, (1,))]


def check(d: Dims) -> None:
    """ModelError naming the first rule the shape breaks, before anything is written. llama.cpp
    (b11434-b11549) kills the server with SIGFPE and no log line on the two rules after the first
    (which keeps the others from reading past the layers), aborts it with a
    GGML_ASSERT on most of the rest (indexer_key_len, rope_dim, n_out_group, hc_count), and refuses
    to load the others."""
    assert isinstance(d, V4Dims)
    ratios = d.compress_ratios
    rules = [
        (len(ratios) >= d.n_layer, f"compress_ratios has {len(ratios)} entries for {d.n_layer} layers"),
        (4 in ratios[: d.n_layer], "at least one layer must have compress ratio 4 (CSA with the "
                                   "indexer); without one llama.cpp dies with SIGFPE"),
        (d.head_dim != d.indexer_key_len, f"head_dim ({d.head_dim}) must differ from indexer_key_len "
                                          "(llama.cpp dies with SIGFPE when they are equal)"),
        (d.indexer_key_len > 0 and d.indexer_key_len % 64 == 0,
         f"indexer_key_len ({d.indexer_key_len}) must be a positive multiple of 64"),
        (d.indexer_key_len >= d.rope_dim, f"indexer_key_len ({d.indexer_key_len}) must be at least "
                                          f"rope_dim ({d.rope_dim})"),
        (0 < d.rope_dim <= d.head_dim and d.rope_dim % 2 == 0,
         f"rope_dim ({d.rope_dim}) must be even and between 1 and head_dim ({d.head_dim})"),
        (set(ratios) <= set(RATIOS), f"compress_ratios {list(ratios)}: each must be 0, 4 or 128"),
        (d.hc_count == HC_COUNT, f"hc_count must be {HC_COUNT} (llama.cpp's hyper-connection kernels)"),
        (d.n_out_group > 0 and d.n_head % d.n_out_group == 0,
         f"n_out_group ({d.n_out_group}) must divide n_head ({d.n_head})"),
        (d.n_expert_shared >= 1, "n_expert_shared must be at least 1"),
        (0 < d.n_expert_used <= d.n_expert, f"n_expert_used ({d.n_expert_used}) must be 1 to "
                                            f"n_expert ({d.n_expert})"),
        (d.n_hash_layer <= d.n_layer, f"n_hash_layer ({d.n_hash_layer}) exceeds n_layer ({d.n_layer})"),
        (d.indexer_top_k > 0 and d.n_swa > 0, "indexer_top_k and n_swa must be positive"),
        (min(d.q_lora, d.out_lora, d.n_ff_exp, d.n_indexer_head, d.head_dim) >= 1,
         "q_lora, out_lora, n_ff_exp, n_indexer_head and head_dim must be at least 1"),
    ]
    broken = next((why for ok, why in rules if not ok), None)
    if broken is not None:
        raise ModelError(f"deepseek4 shape refused: {broken}")


def _ratios(n_layer: int) -> tuple[int, ...]:
    """V4-Flash's pattern: two raw-window layers, then 4 and 128 alternating, the last raw."""
    middle = [4 if i % 2 == 0 else 128 for i in range(n_layer - 3)]
    return (0, 0, *middle, 0)


_TINY = V4Dims(
    n_layer=4, n_embd=256, n_head=4, n_head_kv=1, head_dim=128, n_ff=0, quantized=False,
    n_expert=8, n_expert_used=2, n_ff_exp=128, n_expert_shared=1, q_lora=128, rope_dim=64,
    n_swa=64, n_indexer_head=4, indexer_key_len=64, indexer_top_k=64, n_out_group=2, out_lora=64,
    compress_ratios=(0, 4, 128, 0), n_hash_layer=1,
)
# deepseek2 "small"'s width, depth and experts (12 x 768, 16 routed top-2 + 1 shared, q-LoRA 384)
_SMALL = V4Dims(
    n_layer=12, n_embd=768, n_head=12, n_head_kv=1, head_dim=128, n_ff=0, quantized=True,
    n_expert=16, n_expert_used=2, n_ff_exp=128, n_expert_shared=1, q_lora=384, rope_dim=64,
    n_swa=128, n_indexer_head=4, indexer_key_len=64, indexer_top_k=128, n_out_group=4, out_lora=128,
    compress_ratios=_ratios(12), n_hash_layer=2,
)
# V4-Flash's attention and routing (head_dim 512, 64 heads, rope 64, q-LoRA 1024, 8 output groups
# of rank 1024, indexer 64 x 128 top-512, window 128, 3 hash layers, top-6 + 1 shared, vocabulary
# 129,280) at 2048 wide, 8 layers and 64 experts of width 1024: 4,549,576,309 parameters, 9.1 GB in F16
_GPU = V4Dims(
    n_layer=8, n_embd=2048, n_head=64, n_head_kv=1, head_dim=512, n_ff=0, quantized=False,
    n_vocab=129_280, n_expert=64, n_expert_used=6, n_ff_exp=1024, n_expert_shared=1, q_lora=1024,
    rope_dim=64, n_swa=128, n_indexer_head=64, indexer_key_len=128, indexer_top_k=512, n_out_group=8,
    out_lora=1024, compress_ratios=_ratios(8), n_hash_layer=3,
)

_UNUSED = {"n_head_kv", "n_ff", "n_dense_lead", "kv_lora", "nope_dim", "v_head", "quantized"}
SPEC = ArchSpec(ARCH, None, {"tiny": _TINY, "small": _SMALL, "gpu": _GPU}, layer_tensors, add_hparams,
                extra_tensors, check, dims=frozenset(f.name for f in fields(V4Dims)) - _UNUSED)
