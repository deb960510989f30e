"""The vocabulary of the synthetic model tables: dimensions, tensor specs, one entry per architecture.

A tensor is named by a ``gguf.MODEL_TENSOR`` where the ``gguf`` package's tables know it, else by
a GGUF name template such as ``"blk.{bid}.attn_kv"`` (architectures newer than the package, e.g.
DeepSeek V4). Shapes are numpy's, i.e. ggml's ``ne`` reversed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import gguf

from satbench.gguf.vocab import N_VOCAB

CONTEXT_LENGTH = 4096

TensorKind = gguf.MODEL_TENSOR | str
TensorSpec = tuple[TensorKind, int | None, tuple[int, ...]]


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
    n_vocab: int = N_VOCAB
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


def no_rules(d: Dims) -> None:
    """An architecture without shape rules of its own beyond the table's."""


@dataclass(frozen=True)
class ArchSpec:
    """One architecture: its GGUF name, sizes, tensors, hyper-parameter keys and shape rules.

    ``gguf_arch`` is the ``gguf`` package's enum where it knows the architecture (its tensor
    table is then checked); ``extra_tensors`` come after ``output.weight``; ``check`` raises
    ModelError naming the first rule a shape breaks, before anything is written; ``dims`` names the
    fields it reads, the only ones an override may set.
    """

    name: str
    gguf_arch: gguf.MODEL_ARCH | None
    sizes: Mapping[str, Dims]
    layer_tensors: Callable[[Dims, int], list[TensorSpec]]
    add_hparams: Callable[[gguf.GGUFWriter, Dims], None]
    extra_tensors: Callable[[Dims], list[TensorSpec]] = lambda d: []
    check: Callable[[Dims], None] = no_rules
    dims: frozenset[str] = frozenset()  # the Dims fields this architecture reads (what --dim may set)
