"""The size table: realistic sizes have the intended shapes and parameter counts (nothing written)."""

from __future__ import annotations

import argparse
from dataclasses import replace
from math import prod

import gguf
import pytest

from satbench.cli.args import build_parser
from satbench.cli.main import main
from satbench.errors import ModelError, UserError
from satbench.gguf.shapes import ARCHS, parameter_count, spec_for, tensor_list, tensor_name
from satbench.gguf.vocab import MAX_VOCAB, MIN_VOCAB, N_VOCAB


def test_llama_1_5b_is_llama_3_2_1b_shaped_with_untied_output() -> None:
    _, d = spec_for("llama", "1.5b")
    assert (d.n_embd, d.n_layer, d.n_vocab) == (2048, 16, 128_256)
    assert (d.n_head, d.head_dim, d.n_head_kv, d.n_ff, d.quantized) == (32, 64, 8, 8192, False)
    per_layer = 2 * 2048 + 2 * 2048 * 2048 + 2 * 512 * 2048 + 3 * 8192 * 2048
    assert parameter_count("llama", "1.5b") == 2 * 128_256 * 2048 + 2048 + 16 * per_layer
    assert parameter_count("llama", "1.5b") == 1_498_482_688


def test_deepseek2_64e_is_a_7b_mla_moe() -> None:
    spec, d = spec_for("deepseek2", "64e")
    assert (d.n_expert, d.n_expert_used, d.n_expert_shared, d.n_vocab) == (64, 6, 2, 102_400)
    assert d.kv_lora and d.q_lora and not d.quantized
    assert d.n_layer not in (26, 27)  # llama.cpp would take it for V2-Lite and expect no q-LoRA
    tensors = {tensor_name(k, b): s for k, b, s in tensor_list(spec, d)}
    assert tensors["blk.5.ffn_gate_exps.weight"] == (64, 1408, 2048)
    assert tensors["blk.5.ffn_up_shexp.weight"] == (2 * 1408, 2048)
    assert "blk.0.ffn_gate_exps.weight" not in tensors  # the leading dense layer
    assert parameter_count("deepseek2", "64e") == 6_952_659_648


def test_every_size_counts_what_its_tensor_list_holds() -> None:
    for arch, spec in ARCHS.items():
        for size in spec.sizes:
            _, d = spec_for(arch, size)
            tensors = tensor_list(spec, d)
            assert parameter_count(arch, size) == sum(prod(s) for _, _, s in tensors)
            names = [tensor_name(k, b) for k, b, _ in tensors]
            assert len(names) == len(set(names))
            if spec.gguf_arch is not None:  # deepseek4: gguf 0.19 has no table to check against
                assert set(k for k, _, _ in tensors) <= set(gguf.MODEL_TENSORS[spec.gguf_arch])


def test_vocabulary_override_changes_only_embeddings_and_output() -> None:
    n = parameter_count("llama", "1.5b")
    assert parameter_count("llama", "1.5b", N_VOCAB) == n - 2 * (128_256 - N_VOCAB) * 2048
    assert parameter_count("llama", "tiny", 32_000) == \
        parameter_count("llama", "tiny") + 2 * (32_000 - N_VOCAB) * 256
    _, d = spec_for("deepseek2", "64e", 128_256)
    assert d == replace(ARCHS["deepseek2"].sizes["64e"], n_vocab=128_256)


@pytest.mark.parametrize(
    ("arch", "size", "n_vocab", "match"),
    [
        ("qwen3moe", "1.5b", None, "size '1.5b' for qwen3moe"),
        ("llama", "64e", None, "size"),
        ("mamba", "tiny", None, "architecture"),
        ("llama", "tiny", MIN_VOCAB - 1, "vocabulary"),
        ("llama", "tiny", MAX_VOCAB + 1, "vocabulary"),
        ("llama", "tiny", True, "vocabulary"),
    ],
)
def test_bad_table_lookups_raise(arch: str, size: str, n_vocab: object, match: str) -> None:
    with pytest.raises(ModelError, match=match):
        spec_for(arch, size, n_vocab)  # type: ignore[arg-type]


def _subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def test_cli_offers_exactly_the_table() -> None:
    parser = build_parser()
    make = _subcommand(_subcommand(parser, "models"), "make")
    choices = {a.dest: a.choices for a in make._actions if a.choices}
    every = {size for spec in ARCHS.values() for size in spec.sizes}
    assert set(choices["arch"]) == set(ARCHS) and set(choices["size"]) == every
    for arch in ARCHS:
        for size in every:
            a = parser.parse_args(["models", "make", "--arch", arch, "--size", size, "-o", "m.gguf"])
            assert (a.arch, a.size, a.vocab) == (arch, size, None)
    a = parser.parse_args(["models", "make", "--arch", "llama", "--size", "tiny", "--vocab", "32000",
                           "-o", "m.gguf"])
    assert a.vocab == 32_000
    with pytest.raises(UserError):
        parser.parse_args(["models", "make", "--arch", "llama", "--size", "huge", "-o", "m.gguf"])
    with pytest.raises(UserError):
        parser.parse_args(["models", "make", "--arch", "mamba", "--size", "tiny", "-o", "m.gguf"])


def test_models_make_with_vocab_override(tmp_path, capsys) -> None:
    out = tmp_path / "v.gguf"
    assert main(["models", "make", "--arch", "llama", "--size", "tiny", "--vocab", "2048",
                 "-o", str(out)]) == 0
    line = capsys.readouterr().out
    assert "SYNTHETIC" in line and "vocab 2,048" in line
    assert f"{parameter_count('llama', 'tiny', 2048):,}" in line
    assert main(["models", "make", "--arch", "llama", "--size", "tiny", "--vocab", "10",
                 "-o", str(tmp_path / "w.gguf")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "vocabulary" in err
    assert main(["models", "make", "--arch", "qwen3moe", "--size", "1.5b",
                 "-o", str(tmp_path / "w.gguf")]) == 2
    assert "1.5b" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v.gguf"]
